// `node --conditions=source --import ./test/daemon-source-hooks.mjs ...`: lets child processes of the daemon tests
// (and the processes they fork) import the packages' TypeScript sources, as the tests do.
import { register } from 'node:module';

register('../packages/core/src/index/ts-hooks.fixture.mjs', import.meta.url);
