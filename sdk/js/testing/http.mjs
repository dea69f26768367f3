// Stand-in for the host's `http` import when a plugin runs under Node.js: a test sets
// `answer` (a function of the request) and reads `requests`.

/** Every request sent so far. */
export const requests = [];

/** How requests are answered: `(request) => {status, headers, body}`; throw a string for an `err`. */
export const server = {
  answer: () => {
    throw 'http: no answer set (testing/http.mjs)';
  },
};

export function fetch(request) {
  requests.push(request);
  return server.answer(request);
}
