import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DeviceArena, FileHandle, HostArena, TransferBatch, TransferEngine, crc32c, probeMachine } from '@tiersync/native';
import { MiB, formatBytes, round } from '../bench/stats.js';
import { formatReport } from './doctor.js';
import type { Command } from './main.js';

const usage = `Usage: tiersync demo [--pages N]

Prints what this machine offers, then moves KV-sized pages host -> device (sim) -> file -> host through the
native transfer engine, with CRC32C computed on the way down and verified on the way back.`;

const PAGE = 256 * 1024;

export const demoCommand: Command = {
  summary: 'show the machine report and a short transfer through every path',
  usage,
  async run(args) {
    const pagesArg = args.indexOf('--pages');
    const pages = pagesArg >= 0 ? Number(args[pagesArg + 1]) : 1024;
    if (!Number.isSafeInteger(pages) || pages < 1) {
      console.error('tiersync demo: --pages must be a positive integer');
      return 2;
    }
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-demo-'));
    console.log('== this machine ==');
    console.log(formatReport(probeMachine(dir)));
    console.log(`\n== moving ${pages} pages of ${formatBytes(PAGE)} (${formatBytes(pages * PAGE)}) ==`);
    const engine = new TransferEngine();
    const bytes = pages * PAGE;
    const host = HostArena.create({ capacity: bytes });
    const device = DeviceArena.create({ backend: 'sim', capacity: bytes });
    const back = HostArena.create({ capacity: bytes });
    const file = FileHandle.open(path.join(dir, 'pages.bin'), { writable: true, create: true, truncate: true });
    try {
      // An engine would write KV here; the demo writes a different pattern into every page.
      const view = host.view(0, bytes);
      for (let i = 0; i < bytes; i += 4096) view[i] = (i / 4096) & 0xff;
      const step = async (label: string, batch: TransferBatch, options: Parameters<TransferEngine['submit']>[1] = {}) => {
        const r = await engine.submit(batch, options);
        console.log(`${label.padEnd(22)} ${formatBytes(r.bytes).padStart(10)} in ${round(r.seconds * 1000, 1)} ms (${round(r.bytes / MiB / 1024 / r.seconds, 2)} GiB/s)`);
        return r;
      };
      const batch = (from: HostArena | DeviceArena | FileHandle, to: HostArena | DeviceArena | FileHandle) => {
        const b = new TransferBatch();
        for (let p = 0; p < pages; p++) b.add(from, p * PAGE, to, p * PAGE, PAGE);
        return b;
      };
      const stored = await step('host -> device', batch(host, device), { checksums: true });
      await step('device -> file (sync)', batch(device, file), { durable: true, priority: 'writeBack' });
      const loaded = await step('file -> host', batch(file, back), { expected: stored.checksums! });
      const exact = crc32c(back.view(0, bytes)) === crc32c(host.view(0, bytes));
      console.log(`checksums verified: ${loaded.mismatches!.length === 0 ? 'all pages match' : `${loaded.mismatches!.length} mismatched`}; byte-exact: ${exact}`);
      const s = engine.stats();
      console.log(`engine: ${s.threads} threads, io ${s.io}, ${s.directOps} O_DIRECT ops, ${s.bufferedOps} buffered ops`);
      return exact && loaded.mismatches!.length === 0 ? 0 : 1;
    } finally {
      await engine.close();
      file.close();
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
