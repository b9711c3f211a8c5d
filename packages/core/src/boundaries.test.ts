/**
 * Module boundaries, checked on the sources (docs/ARCHITECTURE.md, the opening section):
 * - inside @tiersync/core, another folder is entered only through its index.ts (tests and fixtures too; within its
 *   own folder a file reaches any other); files directly in src/ (build-info.ts) are one module each, and the package
 *   entry src/index.ts is imported by no one inside;
 * - the import graph of core's non-test sources has no cycles, between folders or between files, type-only imports
 *   included;
 * - no non-test source of a workspace package reaches into another package's files by a relative path (packages
 *   import each other by name, through their `exports`);
 * - every bare import is declared by the importing package: non-test sources in `dependencies` (or peer/optional
 *   ones), tests and fixtures also in `devDependencies` or the workspace root's (so the published @tiersync/core
 *   cannot import fast-check, s3rver or @tiersync/devtools);
 * - every package under packages/ states `engines` and `repository`, and @tiersync/devtools is private.
 *
 * Imports are read with TypeScript's own pre-processor (`ts.preProcessFile`): static imports, `import type`,
 * `export ... from`, dynamic `import()` (also in type positions) and `require()`.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(SRC, '../../..');
const SOURCE = /\.(?:[cm]?ts|[cm]?js)$/;
const SKIP_DIRS = new Set(['node_modules', 'dist', 'build', '.bench']);

/** Tests and test fixtures: `*.test.ts`, `*.fixture.*`, `test-fixtures.ts`, `test-*.ts`. */
function isTestFile(file: string): boolean {
  const base = path.basename(file);
  return /\.test\.[cm]?[tj]s$/.test(base) || /\.fixture\.[cm]?[tj]s$/.test(base) || /^test-/.test(base);
}

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name) || name.startsWith('.')) continue;
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) walk(full, out);
    else if (SOURCE.test(name) && !name.endsWith('.d.ts')) out.push(full);
  }
  return out;
}

/** Every module specifier a file imports (static, type-only, re-exports, dynamic, require). */
function importsOf(file: string): string[] {
  return specifiersIn(readFileSync(file, 'utf8'));
}

function specifiersIn(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
}

/** Resolves a relative specifier to a source file ('.js' written for a '.ts' source, as NodeNext wants). */
function resolveRelative(from: string, spec: string): string | undefined {
  const base = path.resolve(path.dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), `${base}.ts`, path.join(base, 'index.ts')];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile());
}

// ---- core's folders ----

/** The unit a core source belongs to: its top-level folder, or the file itself for files directly in src/. */
function unitOf(file: string): string {
  const rel = path.relative(SRC, file).split(path.sep);
  return rel.length > 1 ? `${rel[0]}/` : rel[0]!;
}

interface Edge {
  from: string;
  to: string;
  spec: string;
}

function coreEdges(): Edge[] {
  const edges: Edge[] = [];
  for (const file of walk(SRC)) {
    for (const spec of importsOf(file)) {
      if (!spec.startsWith('.')) continue;
      const to = resolveRelative(file, spec);
      if (to === undefined) throw new Error(`${path.relative(SRC, file)}: cannot resolve '${spec}'`);
      edges.push({ from: file, to, spec });
    }
  }
  return edges;
}

/** Strongly connected components with more than one member (or a self-loop): each is a cycle. */
function cycles(nodes: Iterable<string>, next: (n: string) => Iterable<string>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next(v)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || [...next(v)].includes(v)) found.push(scc.sort());
    }
  };
  for (const n of nodes) if (!index.has(n)) visit(n);
  return found;
}

/**
 * The import graph of core's non-test sources, with files grouped into nodes by `key`. An edge inside one node is
 * kept only when nodes are files (a file importing itself); inside a folder it is that folder's own business.
 */
function graph(edges: Edge[], key: (file: string) => string, nodesAreFiles: boolean): Map<string, Set<string>> {
  const g = new Map<string, Set<string>>();
  for (const e of edges) {
    if (isTestFile(e.from)) continue;
    const [a, b] = [key(e.from), key(e.to)];
    if (!g.has(a)) g.set(a, new Set());
    if (!g.has(b)) g.set(b, new Set());
    if (a !== b || nodesAreFiles) g.get(a)!.add(b);
  }
  return g;
}

const fileKey = (f: string): string => path.relative(SRC, f);

describe('core folder boundaries', () => {
  const edges = coreEdges();

  it('enters another folder only through its index.ts', () => {
    const bad = edges
      .filter((e) => !path.relative(SRC, e.to).startsWith('..') && unitOf(e.from) !== unitOf(e.to) && unitOf(e.to).endsWith('/'))
      .filter((e) => path.relative(SRC, e.to) !== `${unitOf(e.to)}index.ts`)
      .map((e) => `${fileKey(e.from)} imports '${e.spec}' (enter ${unitOf(e.to)} through ${unitOf(e.to)}index.ts)`);
    expect(bad).toEqual([]);
  });

  it('never imports the package entry (src/index.ts) from inside', () => {
    const bad = edges.filter((e) => fileKey(e.to) === 'index.ts').map((e) => `${fileKey(e.from)} imports '${e.spec}'`);
    expect(bad).toEqual([]);
  });

  it('has no cycles between folders (type-only imports included)', () => {
    const g = graph(edges, unitOf, false);
    expect(cycles(g.keys(), (n) => g.get(n) ?? [])).toEqual([]);
  });

  it('has no cycles between files (type-only imports included)', () => {
    const g = graph(edges, fileKey, true);
    expect(cycles(g.keys(), (n) => g.get(n) ?? [])).toEqual([]);
  });

  it('the import scanner sees every kind of import (self-check)', () => {
    const text = [
      "import a from './a.js';",
      "import type { B } from '../b/index.js';",
      "import { type C, d } from './c.js';",
      "export { e } from './e.js';",
      "export * from './f.js';",
      "export type { G } from './g.js';",
      "const h = await import('./h.js');",
      "type I = typeof import('./i.js');",
      "let j: import('./j.js').J;",
      "import './k.js';",
      "// import { no } from './comment.js';",
    ].join('\n');
    expect(specifiersIn(text)).toEqual(['./a.js', '../b/index.js', './c.js', './e.js', './f.js', './g.js', './h.js', './i.js', './j.js', './k.js']);
  });

  it('the cycle finder finds cycles (self-check)', () => {
    const g: Record<string, string[]> = { a: ['b'], b: ['c'], c: ['a'], d: ['a'], e: ['e'] };
    expect(cycles(Object.keys(g), (n) => g[n] ?? [])).toEqual([['a', 'b', 'c'], ['e']]);
  });
});

// ---- workspace packages ----

interface Manifest {
  name: string;
  private?: boolean;
  engines?: { node?: string };
  repository?: { url?: string; directory?: string };
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

const readManifest = (dir: string): Manifest => JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as Manifest;

/** The workspace's package folders (pnpm-workspace.yaml: packages/*, examples, test) and the workspace root. */
function workspacePackages(): string[] {
  const dirs = readdirSync(path.join(ROOT, 'packages')).map((d) => path.join(ROOT, 'packages', d));
  return [...dirs, path.join(ROOT, 'examples'), path.join(ROOT, 'test'), ROOT].filter((d) => existsSync(path.join(d, 'package.json')));
}

/** A package's own sources; the root's are its scripts/ and its top-level config files (the rest are packages). */
function sourcesOf(dir: string): string[] {
  if (dir !== ROOT) return walk(dir);
  const top = readdirSync(ROOT).filter((n) => SOURCE.test(n) && !n.endsWith('.d.ts')).map((n) => path.join(ROOT, n));
  return [...top, ...walk(path.join(ROOT, 'scripts'))];
}

/** Development-only packages: everything they import counts as a test's import (devDependencies suffice). */
const devOnly = (dir: string): boolean => dir === ROOT || path.relative(ROOT, dir) === 'test';

const BUILTINS = new Set(builtinModules);

/** `@scope/name/sub` -> `@scope/name`; `name/sub` -> `name`; undefined for Node built-ins. */
function packageName(spec: string): string | undefined {
  if (spec.startsWith('node:') || BUILTINS.has(spec.split('/')[0]!)) return undefined;
  const parts = spec.split('/');
  return spec.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
}

describe('workspace package imports', () => {
  const rootDev = Object.keys(readManifest(ROOT).devDependencies ?? {});
  const packages = workspacePackages();

  it('finds the workspace packages', () => {
    expect(packages.map((p) => path.relative(ROOT, p) || '(root)')).toEqual(expect.arrayContaining(['packages/core', 'packages/devtools', 'packages/native', 'packages/policy', 'packages/tiers', 'test', 'examples', '(root)']));
  });

  it.each(packages.map((p) => [path.relative(ROOT, p) || '(root)', p]))('%s declares every package it imports', (_name, dir) => {
    const m = readManifest(dir);
    const runtime = new Set([m.name, ...Object.keys({ ...m.dependencies, ...m.peerDependencies, ...m.optionalDependencies })]);
    const forTests = new Set([...runtime, ...Object.keys(m.devDependencies ?? {}), ...rootDev]);
    const bad: string[] = [];
    for (const file of sourcesOf(dir)) {
      const test = isTestFile(file) || devOnly(dir);
      for (const spec of importsOf(file)) {
        if (spec.startsWith('.') || spec.startsWith('/')) continue;
        const name = packageName(spec);
        if (name !== undefined && !(test ? forTests : runtime).has(name)) {
          bad.push(`${path.relative(ROOT, file)} imports '${spec}': add '${name}' to ${m.name}'s ${test ? 'devDependencies' : 'dependencies'}`);
        }
      }
    }
    expect(bad).toEqual([]);
  });

  it.each(packages.filter((p) => p.includes(`${path.sep}packages${path.sep}`)).map((p) => [path.relative(ROOT, p), p]))(
    '%s states its engines and repository, and is published only when it may be',
    (name, dir) => {
      const m = readManifest(dir);
      expect(m.engines?.node, `${name}: engines.node`).toMatch(/\^20/);
      expect(m.repository, `${name}: repository`).toMatchObject({ url: expect.stringContaining('tiersync'), directory: name });
      // Development tools (fast-check, s3rver, fault harnesses) are never published.
      if (name === 'packages/devtools') expect(m.private).toBe(true);
    },
  );

  it.each(packages.filter((p) => p.includes(`${path.sep}packages${path.sep}`)).map((p) => [path.relative(ROOT, p), p]))(
    '%s reaches no other package by a relative path (tests may use the repository\'s scripts/)',
    (_name, dir) => {
      const bad: string[] = [];
      for (const file of walk(dir).filter((f) => !isTestFile(f))) {
        for (const spec of importsOf(file)) {
          if (!spec.startsWith('.')) continue;
          const target = path.resolve(path.dirname(file), spec);
          if (path.relative(dir, target).startsWith('..')) bad.push(`${path.relative(ROOT, file)} imports '${spec}' (import the package by name)`);
        }
      }
      expect(bad).toEqual([]);
    },
  );
});
