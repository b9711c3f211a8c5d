/**
 * The hierarchy config `tiersync demo` and `tiersync sim --config` read: the very file TierSync and `tiersync serve`
 * accept (YAML or JSON, one schema: server/config.ts over hierarchy/config.ts; the daemon's own sections are
 * allowed and ignored here). `{tmp}` in a tier URL or the index path stands for a scratch folder the caller names.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TierSyncError } from '@tiersync/native/errors';
import type { ResolvedConfig } from '../hierarchy/index.js';
import { loadServerConfig } from '../server/index.js';

/** The demo's own config, shipped in the package as configs/demo.yaml (found from src/cli or dist/cli). */
export function demoConfigPath(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../configs/demo.yaml');
}

/** `config` with `{tmp}` in its tier URLs and index path replaced by `scratch`. */
export function fillScratch(config: ResolvedConfig, scratch: string): ResolvedConfig {
  const fill = (s: string): string => s.replaceAll('{tmp}', scratch);
  return { ...config, tiers: config.tiers.map((t) => ({ ...t, url: fill(t.url) })), index: { ...config.index, path: fill(config.index.path) } };
}

/**
 * Reads and validates a hierarchy config file, replacing `{tmp}` with `scratch`.
 * @throws TierSyncError ERR_CONFIG naming the file or the field that is wrong
 */
export function loadReplayConfig(file: string, scratch: string): ResolvedConfig {
  if (!existsSync(file)) throw new TierSyncError(`config file ${file} does not exist`, 'ERR_CONFIG');
  return fillScratch(loadServerConfig(file).hierarchy, scratch);
}
