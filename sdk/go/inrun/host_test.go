package inrun

import (
	"errors"
	"testing"
)

func TestImportsFailNativelyUntilATestSetsAHost(t *testing.T) {
	if _, err := GetObject("v1", "ConfigMap", "", "x"); !errors.Is(err, ErrNoHost) {
		t.Fatalf("get: %v", err)
	}
	if _, err := Fetch(HTTPRequest{Method: "GET", URL: "http://x"}); !errors.Is(err, ErrNoHost) {
		t.Fatalf("fetch: %v", err)
	}
	var logged []string
	previous := SetHost(Host{
		Log: func(level Level, message string) { logged = append(logged, level.String()+" "+message) },
		Get: func(apiVersion, kind, namespace, name string) (string, bool, error) {
			if name == "absent" {
				return "", false, nil
			}
			return `{"kind":"` + kind + `","metadata":{"name":"` + name + `"}}`, true, nil
		},
		List: func(apiVersion, kind, namespace, selector string) ([]string, error) {
			return []string{`{"a":1}`, `{"b":2}`}, nil
		},
		Fetch: func(req HTTPRequest) (HTTPResponse, error) {
			return HTTPResponse{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(`{"ok":true}`)}, nil
		},
	})
	defer SetHost(previous)
	Log.Infof("hello %s", "world")
	Log.Warnf("100%")
	if len(logged) != 2 || logged[0] != "INFO hello world" || logged[1] != "WARN 100%" {
		t.Fatalf("log: %v", logged)
	}
	cm, err := GetObject("v1", "ConfigMap", "", "x")
	if err != nil || cm["kind"] != "ConfigMap" {
		t.Fatalf("get: %v %v", err, cm)
	}
	if cm, err := GetObject("v1", "ConfigMap", "", "absent"); err != nil || cm != nil {
		t.Fatalf("absent: %v %v", err, cm)
	}
	all, err := ListObjects("v1", "ConfigMap", "*", "app=web")
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %v %v", err, all)
	}
	resp, err := Fetch(HTTPRequest{Method: "GET", URL: "http://x"})
	var body struct{ OK bool }
	if err != nil || resp.Header("Content-Type") != "application/json" || resp.JSON(&body) != nil || !body.OK {
		t.Fatalf("fetch: %v %+v", err, resp)
	}
}
