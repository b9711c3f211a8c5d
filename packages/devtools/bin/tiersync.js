#!/usr/bin/env node
// `pnpm tiersync ...` in a checkout: the published `tiersync` CLI plus the development-only `bench` command.
// Runs from the compiled output (built by `pnpm install`, or `pnpm build`).
import { main } from '../dist/index.js';

process.exitCode = await main(process.argv.slice(2));
