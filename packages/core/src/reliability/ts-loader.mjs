// Lets a plain `node --conditions=source` child import TypeScript sources (used only when the reliability suite
// runs from sources under vitest): registers the module hooks of the index crash test.
import { register } from 'node:module';

register('../index-store/ts-hooks.fixture.mjs', import.meta.url);
