// Child process of the crash test: stores chains of pages in a loop (one beginStore and one commitCopies
// transaction per chain; every fourth round also removes an older chain), printing what it completed, until the
// parent kills it with SIGKILL.  Usage: node --conditions=source crash-writer.fixture.mjs FILE START
import { register } from 'node:module';

register('./ts-hooks.fixture.mjs', import.meta.url);
const { BlockIndex } = await import('./block-index.ts');
const { createNamespace, kvLayoutPreset, pageKeys } = await import('../keys/index.ts');

const [file, startText] = process.argv.slice(2);
const PAGES = 256;
const ns = createNamespace({ model: 'crash-test', layout: kvLayoutPreset('llama-3-8b') });
const chain = (c) => pageKeys(ns, Uint32Array.from({ length: PAGES * 16 }, (_, i) => (i * 7919 + c * 104729) >>> 0));
const index = BlockIndex.open({ path: file, tiers: [{ kind: 'host', persistent: true }, { kind: 'fs', persistent: true }] });
index.registerNamespace({ id: ns.id, model: ns.model, layoutFingerprint: ns.layoutFingerprint, tokensPerPage: 16 });
process.stdout.write('ready\n');
for (let c = Number(startText); ; c++) {
  const keys = chain(c);
  const pages = keys.map((key, i) => ({ key, parent: i ? keys[i - 1] : null, position: i, length: 4096, location: `c${c}/${i}`, crc32c: i }));
  const tier = c % 2 ? 'host' : 'fs';
  const { fresh } = index.beginStore(ns.id, tier, pages);
  index.commitCopies(fresh.map((key) => ({ key, tier, durable: true })));
  process.stdout.write(`committed ${c}\n`);
  if (c % 4 === 3 && c >= 2) {
    const old = c - 2;
    index.removeCopies(old % 2 ? 'host' : 'fs', chain(old));
    process.stdout.write(`removed ${old}\n`);
  }
}
