/**
 * The `tiersync` command line: `main` dispatches to one module per command (cli/<command>.ts). The commands are
 * exported for tests and for the repository's development CLI (packages/devtools adds `bench`).
 */
export { main, commandTable } from './main.js';
export { UsageError, type Command } from './command.js';
export { demoCommand } from './demo.js';
export { doctorCommand } from './doctor.js';
export { schemaCommand } from './schema.js';
export { serveCommand } from './serve.js';
export { planSim, simCommand } from './sim.js';
export { versionCommand } from './version.js';
export { weightsCommand } from './weights.js';
