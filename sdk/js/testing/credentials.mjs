// Stand-in for the host's `credentials` import when a package runs under Node.js: a test
// puts values in `secrets` (`"name/key"` → value); anything else is an `err`.

export const secrets = new Map();

export function get(name, key) {
  const value = secrets.get(`${name}/${key}`);
  if (value === undefined) throw `credentials: key "${key}" of Secret "${name}" is not granted`;
  return value;
}
