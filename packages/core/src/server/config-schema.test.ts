import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { applyEnvOverrides, configJsonSchema, defaultServerConfig, loadServerConfig, parseServerConfig } from './config.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
const SCHEMA_FILE = path.join(root, 'packages/core/schema/config.schema.json');

describe('the config JSON Schema', () => {
  const schema = configJsonSchema();
  const validate = new Ajv2020({ strict: false, allErrors: true }).compile(schema);

  it('the shipped file is the one generated from the zod schema the daemon validates with', () => {
    const shipped = JSON.parse(readFileSync(SCHEMA_FILE, 'utf8'));
    expect(shipped, 'regenerate: pnpm tiersync schema config > packages/core/schema/config.schema.json').toEqual(schema);
  });

  it('accepts every shipped example config and the default config, as the daemon does', () => {
    const dir = path.join(root, 'packages/core/configs');
    const files = readdirSync(dir).filter((f) => /\.(ya?ml|json)$/.test(f));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const text = readFileSync(path.join(dir, f), 'utf8');
      const data = f.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
      expect(validate(data), `${f}: ${JSON.stringify(validate.errors)}`).toBe(true);
      expect(() => parseServerConfig(data), f).not.toThrow();
    }
    const d = defaultServerConfig('/tmp/tiersync-schema-test');
    expect(validate(d), JSON.stringify(validate.errors)).toBe(true);
  });

  it('refuses what the daemon refuses, naming the field', () => {
    const good = defaultServerConfig('/tmp/tiersync-schema-test');
    for (const [bad, field] of [
      [{ ...good, http: { port: 'eighty' } }, 'http.port'],
      [{ ...good, tiers: [] }, 'tiers'],
      [{ ...good, tiers: [{ url: 'host://?capacity=1GiB', highWatermark: 2 }] }, 'tiers.0.highWatermark'],
      [{ ...good, surprise: true }, 'surprise'],
    ] as const) {
      expect(validate(bad), field).toBe(false);
      expect(() => parseServerConfig(bad), field).toThrow(field);
    }
  });

  it('passes peer.encrypt through with a secret and refuses it without one', () => {
    const good = defaultServerConfig('/tmp/tiersync-schema-test');
    expect(parseServerConfig({ ...good, peer: { secret: 'a-long-enough-peer-secret', encrypt: true } }).peer).toMatchObject({ encrypt: true });
    expect(() => parseServerConfig({ ...good, peer: { encrypt: true } })).toThrow(/peer.encrypt: needs peer.secret/);
  });
});

describe('TIERSYNC_* environment overrides', () => {
  it('override the config file and name the variable when wrong', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-env-'));
    try {
      const file = path.join(dir, 'c.yaml');
      writeFileSync(file, 'model: m@1\nlayout: llama-3-8b\ntiers:\n  - url: host://?capacity=1GiB\nhttp:\n  port: 7000\nlog:\n  level: info\n');
      const env = { TIERSYNC_HTTP_PORT: '7123', TIERSYNC_LOG_LEVEL: 'warn', TIERSYNC_INDEX_PATH: path.join(dir, 'i.sqlite') };
      const c = parseServerConfig(applyEnvOverrides(parseYaml(readFileSync(file, 'utf8')), env));
      expect(c.http.port).toBe(7123);
      expect(c.log.level).toBe('warn');
      expect(c.hierarchy.index.path).toBe(env.TIERSYNC_INDEX_PATH);
      expect(() => applyEnvOverrides({}, { TIERSYNC_PEER_PORT: 'x' })).toThrow('TIERSYNC_PEER_PORT');
      expect(() => applyEnvOverrides({}, { TIERSYNC_LOG_LEVEL: 'loud' })).toThrow("TIERSYNC_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'loud'");
      // loadServerConfig applies the process environment.
      process.env.TIERSYNC_HTTP_PORT = '7124';
      try {
        expect(loadServerConfig(file).http.port).toBe(7124);
      } finally {
        delete process.env.TIERSYNC_HTTP_PORT;
      }
      expect(loadServerConfig(file).http.port).toBe(7000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the RESP door's engine switches take their documented values and refuse others, naming the variable", () => {
    const names = ['TIERSYNC_RESP_ENGINE', 'TIERSYNC_RESP_NATIVE_GETS'] as const;
    const resp = (env: Partial<Record<(typeof names)[number], string>>) => {
      const before = names.map((k) => process.env[k]);
      for (const k of names) delete process.env[k];
      Object.assign(process.env, env);
      try {
        const r = parseServerConfig({ model: 'm@1', layout: 'llama-3-8b', tiers: [{ url: 'host://?capacity=1GiB' }], resp: { port: 0 } }).resp!;
        return { engine: r.engine, nativeGets: r.nativeGets };
      } finally {
        names.forEach((k, i) => (before[i] === undefined ? delete process.env[k] : (process.env[k] = before[i])));
      }
    };
    expect(resp({})).toEqual({ engine: 'native', nativeGets: true });
    expect(resp({ TIERSYNC_RESP_ENGINE: 'node', TIERSYNC_RESP_NATIVE_GETS: '0' })).toEqual({ engine: 'node', nativeGets: false });
    expect(resp({ TIERSYNC_RESP_ENGINE: 'native', TIERSYNC_RESP_NATIVE_GETS: '1' })).toEqual({ engine: 'native', nativeGets: true });
    expect(() => resp({ TIERSYNC_RESP_ENGINE: 'nodejs' })).toThrow(expect.objectContaining({ code: 'ERR_CONFIG', message: "environment variable TIERSYNC_RESP_ENGINE must be native or node, got 'nodejs'" }));
    expect(() => resp({ TIERSYNC_RESP_NATIVE_GETS: 'off' })).toThrow(expect.objectContaining({ code: 'ERR_CONFIG', message: expect.stringContaining('TIERSYNC_RESP_NATIVE_GETS must be 0 or 1') }));
  });
});
