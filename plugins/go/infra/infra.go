// Package things is a test guest: the infrastructure package of plugins/infra (Rust) in Go,
// as plugins/c/infra is in C. Its things live in an HTTP service at config.endpoint, one
// per CR, named by its profile: GET /things/<profile> observes (404: absent; else size and
// ready), PUT {"size": n} converges (202: still working), DELETE deletes. config.token
// {secret, key} sends that credential as a bearer token.
package things

import (
	"fmt"
	"strings"

	"inrun.dev/sdk/infra"
	"inrun.dev/sdk/inrun"
)

// Things is the package.
type Things struct{}

func init() { infra.Export(Things{}) }

func size(o *infra.Options) int64 {
	n, _ := inrun.AsInt(o.Config["size"])
	return n
}

func endpoint(o *infra.Options) (string, error) {
	e, ok := inrun.AsString(o.Config["endpoint"])
	if !ok {
		return "", fmt.Errorf("config.endpoint is required")
	}
	return e, nil
}

// send sends method to the thing's URL with the event header and, when config.token is
// set, the credential.
func send(o *infra.Options, method string, body []byte) (*inrun.HTTPResponse, error) {
	base, err := endpoint(o)
	if err != nil {
		return nil, err
	}
	req := inrun.HTTPRequest{
		Method: method,
		URL:    fmt.Sprintf("%s/things/%s", strings.TrimRight(base, "/"), o.Profile),
		Headers: [][2]string{
			{"x-inrun-event", string(o.Event)},
			{"content-type", "application/json"},
		},
		Body: body,
	}
	if token, ok := inrun.AsObject(o.Config["token"]); ok {
		secret, _ := inrun.AsString(token["secret"])
		key, _ := inrun.AsString(token["key"])
		value, err := infra.Credential(secret, key)
		if err != nil {
			return nil, err
		}
		req.Headers = append(req.Headers, [2]string{"authorization", "Bearer " + value})
	}
	return inrun.Fetch(req)
}

// Validate wants a size of at least 1.
func (Things) Validate(o *infra.Options) []string {
	if size(o) < 1 {
		return []string{"config.size must be a whole number from 1"}
	}
	return nil
}

// Identity is the endpoint and profile; the state is the profile and config.zone.
func (Things) Identity(o *infra.Options) (infra.Identity, error) {
	base, err := endpoint(o)
	if err != nil {
		return infra.Identity{}, err
	}
	id := infra.Identity{Boundary: base, Profile: o.Profile}
	id.AddState(o.Profile)
	if zone, ok := inrun.AsString(o.Config["zone"]); ok {
		id.AddState(zone)
	} else {
		id.AddAbsent()
	}
	return id, nil
}

// Observe reads the thing.
func (Things) Observe(o *infra.Options) (infra.Observation, error) {
	answer, err := send(o, "GET", nil)
	if err != nil {
		return infra.Observation{}, err
	}
	if answer.Status == 404 {
		return infra.Observation{}, nil
	}
	if answer.Status != 200 {
		return infra.Observation{}, fmt.Errorf("observe: the service answered %d", answer.Status)
	}
	var thing struct {
		Size  int64 `json:"size"`
		Ready bool  `json:"ready"`
	}
	if err := answer.JSON(&thing); err != nil {
		return infra.Observation{}, fmt.Errorf("observe: %w", err)
	}
	return infra.Observation{Exists: true, Matches: thing.Size == size(o), Ready: thing.Ready}, nil
}

// Converge puts the thing at its size.
func (Things) Converge(o *infra.Options) (infra.Workflow, error) {
	answer, err := send(o, "PUT", fmt.Appendf(nil, `{"size":%d}`, size(o)))
	if err != nil {
		return infra.Workflow{}, err
	}
	switch answer.Status {
	case 200, 201, 204:
		return infra.Completed(""), nil
	case 202:
		return infra.Pending(""), nil
	}
	return infra.Workflow{}, fmt.Errorf("converge: the service answered %d", answer.Status)
}

// Delete deletes the thing.
func (Things) Delete(o *infra.Options) (infra.Workflow, error) {
	answer, err := send(o, "DELETE", nil)
	if err != nil {
		return infra.Workflow{}, err
	}
	switch answer.Status {
	case 200, 204, 404:
		return infra.Completed(""), nil
	case 202:
		return infra.Pending(""), nil
	}
	return infra.Workflow{}, fmt.Errorf("delete: the service answered %d", answer.Status)
}
