// Another process holding an fs tier folder open (for the kernel-lock tests). Uses the compiled packages.
// argv: fs URL, page bytes. Prints "open" once the folder is held; stays until killed.
import { TransferEngine } from '../../../native/dist/index.js';
import { FsTier } from '../../dist/fs/index.js';

const [url, page] = process.argv.slice(2);
const engine = new TransferEngine({ threads: 1 });
const tier = new FsTier(url, { engine, pageBytes: Number(page), fingerprint: 'lock-test' });
await tier.open();
process.stdout.write('open\n');
setInterval(() => undefined, 1 << 30);
