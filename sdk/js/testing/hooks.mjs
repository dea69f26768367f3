// Module resolution hook (see register.mjs): the component's imports become stubs.
const STUBS = {
  'inrun:reconciler/host@0.1.0': './host.mjs',
  'inrun:reconciler/http@0.1.0': './http.mjs',
  'inrun:reconciler/credentials@0.2.0': './credentials.mjs',
};

export async function resolve(specifier, context, next) {
  const stub = STUBS[specifier];
  if (stub) {
    return { url: new URL(stub, import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
