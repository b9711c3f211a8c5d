import { parseArgs } from 'node:util';
import os from 'node:os';
import { probeMachine, type MachineReport } from '@tiersync/native';
import { formatBytes } from '../bench/stats.js';
import type { Command } from './main.js';

const usage = `Usage: tiersync doctor [--path DIR] [--json]

Prints what this machine offers tiersync: cores, memory, io_uring, O_DIRECT on DIR (default: the OS temp
folder), the CUDA backend (or why not), huge pages and the mlock limit.`;

export function formatReport(m: MachineReport): string {
  const yes = (ok: boolean, detail?: string) => (ok ? 'yes' : `no${detail ? ` (${detail})` : ''}`);
  return [
    `cores          ${m.cores}`,
    `memory         ${formatBytes(m.memoryBytes)}`,
    `crc32c         ${m.crc32c}`,
    `io_uring       ${yes(m.ioUring.available, m.ioUring.reason)}`,
    `O_DIRECT       ${yes(m.direct.supported, m.direct.reason)} on ${m.direct.path}`,
    `cuda           ${m.cuda.available ? `yes: ${m.cuda.devices} device(s), runtime ${m.cuda.runtimeVersion}` : `no (${m.cuda.reason})`}`,
    `huge pages     transparent: ${m.hugePages.transparent}; ${m.hugePages.note}`,
    `mlock limit    ${m.memlock}`,
  ].join('\n');
}

export const doctorCommand: Command = {
  summary: 'print what this machine offers (cores, memory, io_uring, O_DIRECT, CUDA, huge pages)',
  usage,
  async run(args) {
    const { values } = parseArgs({ args, options: { path: { type: 'string' }, json: { type: 'boolean' } } });
    const report = probeMachine(values.path ?? os.tmpdir());
    console.log(values.json ? JSON.stringify(report) : formatReport(report));
    return 0;
  },
};
