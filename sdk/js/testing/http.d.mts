// Types of testing/http.mjs, the stand-in for the host's `http` import under Node.js.
/// <reference path="../inrun-wit.d.ts" />
import type { Request, Response } from 'inrun:reconciler/http@0.1.0';

/** Every request sent so far. */
export declare const requests: Request[];

/** How requests are answered; throw a string for an `err`. */
export declare const server: { answer: (request: Request) => Response };

/** Records `request` and returns what `server.answer` gives. */
export declare function fetch(request: Request): Response;
