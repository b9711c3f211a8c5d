// Child process of the graceful-shutdown test: runs `tiersync serve` from the TypeScript sources.
// Usage: node --conditions=source serve.fixture.mjs [serve arguments...]
import { register } from 'node:module';

register('../index/ts-hooks.fixture.mjs', import.meta.url);
const { serveCommand } = await import('../cli/index.ts');
process.exitCode = await serveCommand.run(process.argv.slice(2));
