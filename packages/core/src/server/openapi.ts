/**
 * The daemon's HTTP API as an OpenAPI 3.1 document, generated from the protocol's zod schemas (protocol/): the
 * same schemas the daemon validates requests with, so the description cannot drift from what is enforced. Served at
 * `GET /openapi.json`. OpenAPI 3.1 schemas are JSON Schema 2020-12, which zod emits directly.
 */
import { z } from 'zod';
import { packageVersion } from '../build-info.js';
import { clientOps, clientRoute, daemonRoutes, errorBodySchema, type ClientOp } from '../protocol/index.js';

type JsonSchema = Record<string, unknown>;

/** A zod schema as an embedded JSON Schema (no `$schema` key inside an OpenAPI document). */
function schemaOf(s: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(s, { io, unrepresentable: 'any' }) as JsonSchema;
  return rest;
}

const json = (schema: JsonSchema) => ({ 'application/json': { schema } });
const ERROR_REF = { $ref: '#/components/schemas/Error' };

const STATUS_TEXT: Record<number, string> = {
  200: 'OK',
  202: 'accepted',
  400: 'malformed request (the error names the field)',
  401: 'missing or wrong bearer token',
  404: 'not found / not configured',
  413: 'request too large',
  503: 'shutting down, or a dependency is unreachable',
};

function operation(id: string, summary: string, request: z.ZodType | null, response: z.ZodType, statuses: readonly number[], secured: boolean): JsonSchema {
  const responses: Record<string, unknown> = {};
  for (const s of statuses) {
    responses[String(s)] = s < 300 ? { description: STATUS_TEXT[s] ?? 'OK', content: json(schemaOf(response, 'output')) } : { description: STATUS_TEXT[s] ?? 'refused', content: json(ERROR_REF) };
  }
  responses['default'] = { description: 'refused: a typed error', content: json(ERROR_REF) };
  return {
    operationId: id,
    summary,
    ...(request ? { requestBody: { required: true, content: json(schemaOf(request, 'input')) } } : {}),
    responses,
    ...(secured ? { security: [{}, { bearer: [] }] } : {}),
  };
}

/** The OpenAPI 3.1 document of the daemon's HTTP API. */
export function openApiDocument(): JsonSchema {
  const paths: Record<string, Record<string, unknown>> = {};
  const add = (route: string, method: string, op: JsonSchema) => {
    paths[route] = { ...paths[route], [method.toLowerCase()]: op };
  };
  for (const [route, r] of Object.entries(daemonRoutes)) {
    const id = route.replace(/^\/(v1\/)?/, '').replace(/[^a-z]+(.)/g, (_, c: string) => c.toUpperCase());
    add(route, r.method, operation(id, r.summary, r.request, r.response, r.statuses, route === '/v1/prefetch'));
  }
  for (const [op, spec] of Object.entries(clientOps) as Array<[ClientOp, (typeof clientOps)[ClientOp]]>) {
    add(clientRoute(op), spec.method, operation(`client${op[0]!.toUpperCase()}${op.slice(1)}`, `client API: ${op}`, spec.request, spec.response, [200, 400, 401], true));
  }
  add('/metrics', 'GET', { operationId: 'metrics', summary: 'Prometheus metrics (text exposition format)', responses: { '200': { description: 'OK', content: { 'text/plain': { schema: { type: 'string' } } } } } });
  add('/openapi.json', 'GET', { operationId: 'openapi', summary: 'this document', responses: { '200': { description: 'OK', content: json({ type: 'object' }) } } });
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'tiersync daemon',
      version: packageVersion(),
      description: 'The HTTP API of `tiersync serve` (docs/SERVE.md). Page bytes never travel here: same-host clients move them through the shared-memory host tier, other hosts through the native peer protocol.',
    },
    paths,
    components: {
      schemas: { Error: schemaOf(errorBodySchema, 'output') },
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'http.token, or a tenant token of the client API' } },
    },
  };
}
