import { defineConfig } from 'vitest/config';

// One project per package; tests import TypeScript sources through the "source" export condition,
// so they need no build step (the native addon itself is built at install time).
const sourceFirst = { resolve: { conditions: ['source', 'import', 'node', 'default'] } };
const project = (name: string, include: string[]) => ({
  extends: true as const,
  test: { name, include },
});

export default defineConfig({
  ...sourceFirst,
  ssr: sourceFirst,
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      project('native', ['packages/native/src/**/*.test.ts']),
      project('policy', ['packages/policy/src/**/*.test.ts']),
      project('tiers', ['packages/tiers/src/**/*.test.ts']),
      project('core', ['packages/core/src/**/*.test.ts']),
      project('devtools', ['packages/devtools/src/**/*.test.ts']),
      project('integration', ['test/**/*.test.ts']),
    ],
  },
});
