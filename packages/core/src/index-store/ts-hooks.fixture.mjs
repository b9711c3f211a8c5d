// Moved to ../index/ts-hooks.fixture.mjs; this re-export keeps older loaders working until integration.
export { resolve, load } from '../index/ts-hooks.fixture.mjs';
