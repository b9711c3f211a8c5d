/**
 * The daemon's own HTTP routes (beside the client API of client.ts): health, readiness, stats, token lookups and
 * prefetch, cluster membership. The daemon validates with these schemas (server/server.ts) and the OpenAPI document
 * (server/openapi.ts) is generated from them, so the published description cannot drift from what is enforced.
 */
import { z } from 'zod';

const uint32 = z.number().int('must be an integer').min(0, 'must be in [0, 2^32)').max(0xffffffff, 'must be in [0, 2^32)');

/** Most tokens one lookup may carry on the wire (a daemon's http.maxLookupTokens may set fewer). */
export const MAX_PROTOCOL_TOKENS = 1 << 24;

/** `POST /v1/lookup` and `/v1/prefetch`: a prompt's token ids. */
export const tokensRequestSchema = z
  .object({
    tokens: z.array(uint32).max(MAX_PROTOCOL_TOKENS, `must hold at most ${MAX_PROTOCOL_TOKENS} token ids`),
    /** Lookup only: also ask the cluster registry which hosts hold a longer prefix (default true with a cluster). */
    cluster: z.boolean().optional(),
  })
  .strict();

export const lookupResultSchema = z.object({
  pagesRequested: z.number().int(),
  /** Tokens covered by the cached prefix. */
  tokens: z.number().int(),
  estimatedLoadMs: z.number(),
  pages: z.array(z.object({ key: z.string(), tier: z.string(), tiers: z.array(z.string()) })),
  cluster: z
    .union([
      z.object({ holders: z.array(z.object({ node: z.string(), peer: z.string(), pages: z.number().int(), tokens: z.number().int() })) }),
      z.object({ error: z.string() }),
    ])
    .optional(),
});

export const prefetchResultSchema = z.object({ pagesRequested: z.number().int(), pagesQueued: z.number().int() });

/** `GET /healthz`: the process is alive (200), or draining for shutdown (503). */
export const healthSchema = z.object({ status: z.enum(['ok', 'closing']), node: z.string(), uptimeSeconds: z.number() });

/**
 * `GET /readyz`: the daemon can serve traffic (200): its hierarchy is open and it is not shutting down. Otherwise
 * 503. `checks` says what each part reports; a cluster registry that is down does not make the daemon unready
 * (local tiers still serve), it is reported.
 */
export const readinessSchema = z.object({
  ready: z.boolean(),
  checks: z.object({
    hierarchy: z.enum(['open', 'closed']),
    shutdown: z.boolean(),
    clientApi: z.enum(['on', 'off']),
    registry: z.enum(['up', 'down', 'none']),
  }),
});

/** `GET /v1/stats`: per-tier occupancy and counters, the index and the engine (fields may grow). */
export const statsSchema = z.looseObject({
  node: z.string(),
  tiers: z.array(z.looseObject({ name: z.string(), kind: z.string(), capacityPages: z.number(), usedPages: z.number() })),
});

export const clusterNodesSchema = z.object({
  nodes: z.array(z.object({ id: z.string(), peer: z.string(), http: z.string(), model: z.string(), startedAt: z.number() })),
});


/** Every daemon route with its method and body schemas (`request: null` takes no body). */
export const daemonRoutes = {
  '/healthz': { method: 'GET', summary: 'liveness', request: null, response: healthSchema, statuses: [200, 503] },
  '/readyz': { method: 'GET', summary: 'readiness to serve traffic', request: null, response: readinessSchema, statuses: [200, 503] },
  '/v1/stats': { method: 'GET', summary: 'tiers, index, engine and daemon counters', request: null, response: statsSchema, statuses: [200] },
  '/v1/lookup': { method: 'POST', summary: 'longest cached prefix of a prompt, with where each page is', request: tokensRequestSchema, response: lookupResultSchema, statuses: [200, 400, 413] },
  '/v1/prefetch': { method: 'POST', summary: 'queue promotion of a prompt\'s cached prefix into the first tier (bearer token)', request: tokensRequestSchema, response: prefetchResultSchema, statuses: [202, 400, 401, 413] },
  '/v1/cluster/nodes': { method: 'GET', summary: 'live daemons of the cluster registry', request: null, response: clusterNodesSchema, statuses: [200, 404, 503] },
} as const;

export type DaemonRoute = keyof typeof daemonRoutes;
