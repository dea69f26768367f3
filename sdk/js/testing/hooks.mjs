// Module resolution hook (see register.mjs): the component's host import becomes a stub.
const HOST = 'inrun:reconciler/host@0.1.0';

export async function resolve(specifier, context, next) {
  if (specifier === HOST) {
    return { url: new URL('./host.mjs', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
