import { parseArgs } from 'node:util';
import { accessSync, constants, existsSync, statfsSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PeerClient, TierSyncError, formatCrc32c, formatPeerFrames, probeMachine, type MachineReport } from '@tiersync/native';
import { parseFsUrl, parseHbmUrl, parseHostUrl, parseObjectUrl, parsePeerUrl, shmHugePages, type ObjectTierConfig, type PeerTierConfig } from '@tiersync/tiers';
import { loadServerConfig, type ResolvedServerConfig } from '../server/index.js';
import { formatSize } from '../sim/index.js';
import type { Command } from './command.js';
import { fillScratch } from './replay-config.js';

const usage = `Usage: tiersync doctor [--path DIR] [--config FILE] [--json]

Prints what this machine offers tiersync: cores, memory, the CRC32C implementation, the library that seals
authenticated peer frames, io_uring, O_DIRECT on DIR (default: the OS temp folder), the CUDA backend (or why
not), huge pages and the mlock limit.

  --config FILE  also check what a daemon/hierarchy config asks for: each tier's folder or /dev/shm file has room
                 and is writable, a cuda HBM tier has a device, an object tier's URL parses and its credentials
                 variables are set, peers accept the handshake with the tier's secret, object endpoints and the
                 cluster's Redis answer on TCP (nothing is sent to a bucket).
                 \`{tmp}\` (demo and sim configs) is checked as the folder the demo would make under the OS temp
                 folder. Exit code 1 when something it asks for is missing.
  --json         one JSON object: { machine, checks: [{ check, ok, detail }], ok }`;

/** One thing a config asks of this machine, and whether the machine has it. */
export interface DoctorCheck {
  check: string;
  ok: boolean;
  detail: string;
}

export function formatReport(m: MachineReport): string {
  const yes = (ok: boolean, detail?: string) => (ok ? 'yes' : `no${detail ? ` (${detail})` : ''}`);
  return [
    `cores          ${m.cores}`,
    `memory         ${formatSize(m.memoryBytes)}`,
    `crc32c         ${formatCrc32c(m.crc32c)}`,
    `peer frames    ${formatPeerFrames(m.peerFrames)}`,
    `io_uring       ${yes(m.ioUring.available, m.ioUring.reason)}`,
    `O_DIRECT       ${yes(m.direct.supported, m.direct.reason)} on ${m.direct.path}`,
    `cuda           ${m.cuda.available ? `yes: ${m.cuda.devices} device(s), runtime ${m.cuda.runtimeVersion}` : `no (${m.cuda.reason})`}`,
    `huge pages     transparent: ${m.hugePages.transparent}; ${m.hugePages.note}`,
    `mlock limit    ${m.memlock}`,
  ].join('\n');
}

/** The nearest folder that exists at or above `p` (where a tier's folder would be created). */
function existingAncestor(p: string): string {
  let dir = path.resolve(p);
  while (!existsSync(dir) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
}

/** A folder the tier writes under: writable, with `need` bytes free (0: only writable). */
function folderCheck(check: string, folder: string, need: number): DoctorCheck {
  const at = existingAncestor(folder);
  try {
    accessSync(at, constants.W_OK);
  } catch {
    return { check, ok: false, detail: `${at} is not writable by this user` };
  }
  const s = statfsSync(at);
  const free = s.bavail * s.bsize;
  if (need > 0 && free < need) return { check, ok: false, detail: `${formatSize(free)} free under ${at}, the tier's capacity is ${formatSize(need)}` };
  return { check, ok: true, detail: `${formatSize(free)} free under ${at}` };
}

function tcpCheck(check: string, host: string, port: number, timeoutMs = 2000): Promise<DoctorCheck> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean, detail: string) => {
      socket.destroy();
      resolve({ check, ok, detail });
    };
    socket.setTimeout(timeoutMs, () => done(false, `no answer from ${host}:${port} within ${timeoutMs} ms`));
    socket.once('connect', () => done(true, `${host}:${port} accepts connections`));
    socket.once('error', (e) => done(false, `${host}:${port}: ${e.message}`));
  });
}

/**
 * A peer tier's server: the whole handshake, with the tier's secret and encryption (a wrong secret fails the HMAC
 * challenge here, as it would at the daemon's start; a TCP connect alone passed it). No page is sent.
 */
async function peerCheck(check: string, peer: PeerTierConfig, timeoutMs = 2000): Promise<DoctorCheck> {
  const at = `${peer.host}:${peer.port}`;
  try {
    const client = await PeerClient.connect({ host: peer.host, port: peer.port, streams: 1, timeoutMs, encrypt: peer.encrypt, ...(peer.secret ? { secret: peer.secret } : {}) });
    client.close();
    return { check, ok: true, detail: `${at} accepts connections${peer.secret ? ` and this secret${peer.encrypt ? ' (frames encrypted)' : ''}` : ''}` };
  } catch (e) {
    const err = e as TierSyncError;
    return { check, ok: false, detail: err.code === 'ERR_AUTH' ? `${at} refused the handshake: ${err.message} (is the secret the one the peer's daemon has?)` : `${at}: ${err.message}` };
  }
}

/** Whether this process could listen on host:port now (a daemon already running there holds it). */
function listenCheck(check: string, host: string, port: number): Promise<DoctorCheck> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', (e: NodeJS.ErrnoException) => resolve({ check, ok: false, detail: `${host}:${port} cannot be listened on: ${e.code === 'EADDRINUSE' ? 'in use (another daemon?)' : e.message}` }));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve({ check, ok: true, detail: `${host}:${port} is free` })));
  });
}

/** `url` without its `credentials=` option. */
function withoutCredentials(url: string): string {
  return url.replace(/([?&])credentials=[^&#]*&?/, '$1').replace(/[?&](?=#|$)/, '');
}

/**
 * An object tier (s3://, gs://): its URL as the driver parses it (so the errors are the ones `serve` gives), the
 * variables of `credentials=env:PREFIX` set, and its endpoint accepting TCP connections. Nothing is sent to the
 * bucket: whether it exists and the keys are accepted shows at the daemon's start.
 */
function objectChecks(name: string, url: string): Array<DoctorCheck | Promise<DoctorCheck>> {
  const checks: Array<DoctorCheck | Promise<DoctorCheck>> = [];
  // The parser's own rule for the prefix; anything else is left to the parser to refuse.
  const prefix = /[?&]credentials=env:([A-Z_][A-Z0-9_]{0,63})(?=[&#]|$)/.exec(url)?.[1];
  const unset = prefix ? [`${prefix}_ACCESS_KEY_ID`, `${prefix}_SECRET_ACCESS_KEY`].filter((v) => !process.env[v]) : [];
  const parse = (u: string): ObjectTierConfig | TierSyncError => {
    try {
      return parseObjectUrl(u);
    } catch (e) {
      if (e instanceof TierSyncError) return e;
      throw e;
    }
  };
  let config = parse(url);
  // Unset credentials variables alone (the line below names both) leave the URL line passing and the endpoint still
  // checked; any other fault shows as the error serve gives for this URL.
  if (config instanceof TierSyncError && unset.length) {
    const rest = parse(withoutCredentials(url));
    if (!(rest instanceof TierSyncError)) config = rest;
  }
  if (config instanceof TierSyncError) checks.push({ check: `${name}: URL`, ok: false, detail: config.message });
  else checks.push({ check: `${name}: URL`, ok: true, detail: `bucket '${config.bucket}'${config.prefix ? `, prefix '${config.prefix}'` : ''}, region ${config.region}` });
  if (prefix) {
    checks.push({
      check: `${name}: credentials env:${prefix}`,
      ok: unset.length === 0,
      detail: unset.length ? `${unset.join(' and ')} ${unset.length > 1 ? 'are' : 'is'} not set in this environment (the daemon reads them at start)` : `${prefix}_ACCESS_KEY_ID and ${prefix}_SECRET_ACCESS_KEY are set`,
    });
  }
  if (!(config instanceof TierSyncError)) {
    // AWS (no endpoint option): the region's S3 endpoint stands for the one the SDK picks.
    const endpoint = new URL(config.endpoint ?? `https://s3.${config.region}.amazonaws.com`);
    const port = Number(endpoint.port || (endpoint.protocol === 'http:' ? 80 : 443));
    checks.push(tcpCheck(`${name}: endpoint ${endpoint.origin}`, endpoint.hostname.replace(/^\[|\]$/g, ''), port));
  }
  return checks;
}

/** Checks what `config` asks of this machine. */
export async function checkConfig(config: ResolvedServerConfig, machine: MachineReport): Promise<DoctorCheck[]> {
  const checks: Array<DoctorCheck | Promise<DoctorCheck>> = [];
  for (const [i, t] of config.hierarchy.tiers.entries()) {
    const scheme = t.url.slice(0, t.url.indexOf(':'));
    const name = `tiers.${i} (${t.name ?? scheme})`;
    if (scheme === 'fs') {
      const fs = parseFsUrl(t.url);
      // A tier already there has its slab files: only a new one needs its capacity free.
      checks.push(folderCheck(`${name}: folder ${fs.path}`, fs.path, existsSync(fs.path) ? 0 : fs.capacity));
    } else if (scheme === 'host') {
      const host = parseHostUrl(t.url);
      if (host.shm) checks.push(folderCheck(`${name}: shared memory file ${host.shm}`, path.dirname(host.shm), existsSync(host.shm) ? 0 : host.capacity));
      // Informational (not required): 4 KiB pages only make copies into and out of the arena slower.
      const huge = host.shm ? shmHugePages(host.shm) : undefined;
      if (huge) checks.push({ check: `${name}: huge pages for ${host.shm}`, ok: true, detail: huge.allowed ? `yes (${huge.mount} huge=${huge.huge}, shmem_enabled ${huge.shmemEnabled})` : `no: ${huge.mount} is mounted huge=${huge.huge} (shmem_enabled ${huge.shmemEnabled}), so the arena is mapped in 4 KiB pages; see the host tier README to allow them` });
      else if (host.capacity > machine.memoryBytes) checks.push({ check: `${name}: host RAM`, ok: false, detail: `capacity ${formatSize(host.capacity)} exceeds this machine's ${formatSize(machine.memoryBytes)}` });
    } else if (scheme === 'hbm') {
      const hbm = parseHbmUrl(t.url);
      if (hbm.backend === 'cuda') checks.push({ check: `${name}: CUDA device`, ok: machine.cuda.available, detail: machine.cuda.available ? `${machine.cuda.devices} device(s)` : (machine.cuda.reason ?? 'unavailable') });
    } else if (scheme === 'peer') {
      const peer = parsePeerUrl(t.url);
      checks.push(peerCheck(`${name}: peer ${peer.host}:${peer.port}`, peer));
    } else if (scheme === 's3' || scheme === 'gs') {
      checks.push(...objectChecks(name, t.url));
    }
  }
  // Port 0 picks a free port at start: nothing to check.
  if (config.http.port) checks.push(listenCheck('http: listen', config.http.host, config.http.port));
  if (config.peer.enabled && config.peer.port) checks.push(listenCheck('peer: listen', config.peer.host, config.peer.port));
  if (config.resp?.port) checks.push(listenCheck('resp: listen', config.resp.host, config.resp.port));
  if (config.hierarchy.index.path !== ':memory:') checks.push(folderCheck(`index: folder of ${config.hierarchy.index.path}`, path.dirname(config.hierarchy.index.path), 0));
  if (config.cluster) {
    const u = new URL(config.cluster.redis);
    checks.push(tcpCheck(`cluster: Redis ${u.hostname}:${u.port || 6379}`, u.hostname, Number(u.port || 6379)));
  }
  return Promise.all(checks);
}

export const doctorCommand: Command = {
  summary: 'print what this machine offers (cores, memory, CRC32C, peer frame crypto, io_uring, O_DIRECT, CUDA, huge pages); check a config',
  usage,
  async run(args) {
    const { values } = parseArgs({ args, options: { path: { type: 'string' }, config: { type: 'string' }, json: { type: 'boolean' } } });
    const machine = probeMachine(values.path ?? os.tmpdir());
    let checks: DoctorCheck[] = [];
    if (values.config) {
      const config = loadServerConfig(values.config);
      checks = await checkConfig({ ...config, hierarchy: fillScratch(config.hierarchy, path.join(os.tmpdir(), 'tiersync-demo')) }, machine);
    }
    const ok = checks.every((c) => c.ok);
    if (values.json) console.log(JSON.stringify({ machine, checks, ok }));
    else {
      console.log(formatReport(machine));
      if (checks.length) console.log(['', `config ${values.config}:`, ...checks.map((c) => `  ${c.ok ? 'ok     ' : 'MISSING'} ${c.check}: ${c.detail}`)].join('\n'));
    }
    return ok ? 0 : 1;
  },
};
