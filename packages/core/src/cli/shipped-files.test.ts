/**
 * The CLI reads some files at run time (the demo's config, the bundled traces): they must lie inside
 * @tiersync/core under a folder its package.json publishes, or `tiersync demo` works in this repository and fails
 * for everyone who installs the package.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { bundledTrace } from '../sim/index.js';
import { demoConfigPath } from './replay-config.js';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const published: string[] = JSON.parse(readFileSync(path.join(PACKAGE, 'package.json'), 'utf8')).files;

describe('files the CLI reads at run time', () => {
  it.each([
    ['the demo config', demoConfigPath()],
    ['the default trace', bundledTrace()],
    ['the Azure code trace', bundledTrace('AzureLLMInferenceTrace_code.csv.gz')],
  ])('%s exists inside the package, under a published folder', (_what, file) => {
    expect(existsSync(file), file).toBe(true);
    const inside = path.relative(PACKAGE, file);
    expect(inside.startsWith('..'), `${file} lies outside ${PACKAGE}`).toBe(false);
    expect(published, `package.json "files" must list ${inside.split(path.sep)[0]}`).toContain(inside.split(path.sep)[0]);
  });
});
