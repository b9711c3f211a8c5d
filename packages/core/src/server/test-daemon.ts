/**
 * A daemon for the server's tests: a host tier in /dev/shm over an fs tier (written through by default), in a fresh temporary
 * folder, with a one-group layout whose pages are PAGE bytes. `close()` stops it and removes both. Test-only (as
 * hierarchy/test-fixtures.ts): it imports no test runner.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseServerConfig } from './config.js';
import { TierSyncServer } from './server.js';

export const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
/** Bytes per page of `layout`. */
export const PAGE = 8 * 1024;

export interface TestDaemon {
  readonly server: TierSyncServer;
  /** The daemon's temporary folder (fs tier, index, client socket). */
  readonly dir: string;
  close(): Promise<void>;
}

export interface TestDaemonOptions {
  hostPages: number;
  fsPages: number;
  /** Whether the fs tier is written through (default true). */
  writeThrough?: boolean;
  /** More settings of the host tier (policy, watermarks). */
  host?: Record<string, unknown>;
  /** The rest of the config (peer, tenants, client), given the daemon's folder. */
  config: (dir: string) => Record<string, unknown>;
}

/** Starts a daemon named `name` (its model `name@1`, its folder and shm file named after it). */
export async function startTestDaemon(name: string, o: TestDaemonOptions): Promise<TestDaemon> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `tiersync-${name}-`));
  const shm = `/dev/shm/tiersync-${name}-${process.pid}`;
  const remove = () => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(shm, { force: true });
  };
  let server: TierSyncServer;
  try {
    server = await TierSyncServer.start(
      parseServerConfig({
        model: `${name}@1`,
        layout,
        tiers: [
          { url: `host://?capacity=${o.hostPages * PAGE}&shm=${shm}&prefault=false`, name: 'host', ...o.host },
          { url: `fs://${dir}/fs?capacity=${o.fsPages * PAGE}`, name: 'fs', ...(o.writeThrough === false ? {} : { writeThrough: true }) },
        ],
        index: { path: path.join(dir, 'index.sqlite') },
        http: { port: 0 },
        log: { level: 'silent' },
        ...o.config(dir),
      }),
    );
  } catch (e) {
    remove();
    throw e;
  }
  return {
    server,
    dir,
    async close() {
      await server.close();
      remove();
    },
  };
}
