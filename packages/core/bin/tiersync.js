#!/usr/bin/env node
// The CLI runs from the compiled output (built by `pnpm install`, or `pnpm build`).
import { main } from '../dist/cli/main.js';

process.exitCode = await main(process.argv.slice(2));
