// Lets a plain `node --conditions=source` child import TypeScript sources (used only when the reliability suite
// runs from sources under vitest, in a checkout): registers the TypeScript module hooks that core's own crash test
// uses (packages/core/src/index/ts-hooks.fixture.mjs), so there is one copy of them.
import { register } from 'node:module';

register('../../../core/src/index/ts-hooks.fixture.mjs', import.meta.url);
