/**
 * protocol/: the request and response schemas shared by the daemon (server/) and its clients (client/). Pure: it
 * imports zod and the error type, nothing of the hierarchy, so a client bundle carries no daemon code.
 */
import { z } from 'zod';
import { clientOps, type ClientOp } from './client.js';
import { errorBodySchema } from './errors.js';

export * from './client.js';
export * from './frames.js';
export * from './daemon.js';
export { ERROR_CODES, ERROR_STATUS, ProtocolError, errorBodySchema, errorFromBody, fieldName, parseRequest, type ErrorBody } from './errors.js';

/**
 * The client protocol as JSON Schema (draft 2020-12), for clients in other languages: per op its method, route,
 * request and response schemas, plus the error body.
 */
export function clientProtocolJsonSchema(): { ops: Record<ClientOp, { method: string; route: string; request: unknown; response: unknown }>; error: unknown } {
  const ops = {} as Record<ClientOp, { method: string; route: string; request: unknown; response: unknown }>;
  for (const [op, spec] of Object.entries(clientOps) as Array<[ClientOp, (typeof clientOps)[ClientOp]]>) {
    ops[op] = { method: spec.method, route: `/v1/client/${op}`, request: spec.request ? z.toJSONSchema(spec.request, { io: 'input' }) : null, response: z.toJSONSchema(spec.response) };
  }
  return { ops, error: z.toJSONSchema(errorBodySchema) };
}
