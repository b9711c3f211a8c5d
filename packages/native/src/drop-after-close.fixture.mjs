// Child process of wrap-lifetime.test.ts (run with --expose-gc). Uses the compiled package.
// argv "rounds N": closes a RESP door and a peer server while calls from their native threads are still queued for
// the JS thread, drops them and collects garbage at once, N times. A door freed before its queued calls ran
// crashed the process here within a few rounds (the peer server had the same shape and gets the same check).
// argv "port-in-use": constructs both on a port already taken, which fails; the process must still exit (the
// failed objects' thread-safe functions kept it alive).
// Prints "ok" and what it did.
import net from 'node:net';
import { setImmediate as tick } from 'node:timers/promises';
import { HostArena, PeerClient, PeerServer, RespDoorNative } from '../dist/index.js';

const PAGE = 65536;
const pause = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

async function collect() {
  for (let i = 0; i < 2; i++) {
    globalThis.gc();
    await tick();
  }
}

async function dropAfterClose(arena, rounds) {
  for (let r = 0; r < rounds; r++) {
    let door = new RespDoorNative(arena, { pageBytes: PAGE }, () => {});
    const socket = net.connect(door.port, '127.0.0.1');
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('*1\r\n$4\r\nPING\r\n'.repeat(200));
    pause(2); // the door thread queues its events meanwhile; they are delivered only after the close below
    door.close();
    door = null;
    await collect();
    socket.destroy();

    let server = new PeerServer(arena, () => ({ statuses: new Uint8Array(1) }));
    const client = await PeerClient.connect({ host: '127.0.0.1', port: server.port, streams: 1 });
    const asked = client.has(['0'.repeat(64)]).catch(() => undefined);
    pause(2); // the server's connection thread queues its plan call
    server.close();
    server = null;
    await collect();
    await asked;
    client.close();
  }
  return `${rounds}`;
}

async function portInUse(arena) {
  const taken = net.createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => taken.once('listening', resolve));
  const { port } = taken.address();
  const codes = [];
  for (const make of [() => new RespDoorNative(arena, { pageBytes: PAGE, port }, () => {}), () => new PeerServer(arena, () => {}, { port })]) {
    try {
      make();
      codes.push('constructed');
    } catch (e) {
      codes.push(e.code);
    }
  }
  taken.close();
  await collect();
  return codes.join(' ');
}

const arena = HostArena.create({ capacity: 16 * PAGE });
const [mode, n] = process.argv.slice(2);
const did = mode === 'rounds' ? await dropAfterClose(arena, Number(n)) : await portInUse(arena);
arena.close();
process.stdout.write(`ok ${did}\n`);
