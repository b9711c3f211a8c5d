/**
 * The commands the RESP door answers, with Redis's reply shapes and error texts (so clients written for Redis
 * react the same way): the key/value commands KV-cache connectors use (GET, SET, MGET, MSET, EXISTS, DEL, SCAN)
 * and what redis-cli and redis-benchmark send around them (PING, AUTH, HELLO, INFO, COMMAND, CONFIG GET, CLIENT,
 * SELECT, QUIT, ...).
 *
 * RESP3: after `HELLO 3` a connection's replies use RESP3's types where Redis 7 uses them for these commands
 * (github.com/redis/redis-specifications/blob/master/protocol/RESP3.md): null `_` for a missing value (GET, MGET,
 * SET NX/XX not done, CLIENT GETNAME, COMMAND INFO of an unknown command), maps for HELLO, CONFIG GET and
 * COMMAND DOCS, sets for COMMAND's flags, verbatim strings for INFO and CLIENT INFO. None of the commands served
 * here answers a boolean or a double in Redis 7 (the encoder has them: replyBoolean, replyDouble).
 */
import { TierSyncError } from '@tiersync/native';
import type { RespConnection } from './connection.js';
import type { ReadValue } from './door-api.js';
import { EMPTY_ARRAY, OK, PONG, RESP_CRLF as CRLF, bulkHeader, bulkParts, encodeArrayHeader, encodeBulk, encodeError, encodeInteger, encodeSimple, replyMapHeader, replyNull, replySetHeader, replyVerbatim } from './encoder.js';
import { globMatch } from './keyspace.js';
import { latin1 } from './parser.js';

type Handler = (c: RespConnection, args: Uint8Array[]) => void | Promise<void>;

interface CommandSpec {
  /** Redis arity: n = exactly n arguments (with the name), -n = at least n. */
  arity: number;
  /** Runs before AUTH (AUTH, HELLO, QUIT). */
  open?: boolean;
  flags: string[];
  /** First key, last key (-1: the last argument), step; 0 0 0 when the command takes no keys. */
  keys: [number, number, number];
  run: Handler;
}

const text = (b: Uint8Array | undefined) => (b ? latin1(b) : '');
const upper = (b: Uint8Array | undefined) => text(b).toUpperCase();

class ReplyError extends Error {}
/** A reply was cut short (a streamed value failed midway): the connection is closed, no error reply follows. */
class ReplyCut extends Error {}
/** An error reply with Redis's wording (the first word is the error kind). */
const fail = (message: string): never => {
  throw new ReplyError(message);
};

function integerArg(b: Uint8Array | undefined): number {
  const s = text(b);
  if (!/^-?\d{1,18}$/.test(s)) fail('ERR value is not an integer or out of range');
  return Number(s);
}

/** An array of bulk strings (strings are latin1, like keys). */
function bulkArray(items: ReadonlyArray<string | Uint8Array>): Buffer {
  return Buffer.concat([encodeArrayHeader(items.length), ...items.map((x) => encodeBulk(typeof x === 'string' ? Buffer.from(x, 'latin1') : x))]);
}

/**
 * Replies with values (one, or an array of them). Values loaded whole are sent from staging memory, each slice
 * released once the kernel has the bytes; longer ones are streamed window by window. A stream that fails midway
 * cannot be turned into an error reply (its length was sent): the client is closed.
 */
async function sendValues(c: RespConnection, values: ReadonlyArray<ReadValue | null>, asArray: boolean): Promise<void> {
  let parts: Uint8Array[] = asArray ? [encodeArrayHeader(values.length)] : [];
  let sent: ReadValue[] = [];
  let pinned = false;
  const flush = () => {
    if (!parts.length) return;
    const done = sent;
    // Values sent from pinned slots hold them until the kernel has the bytes: a client that does not read them
    // within the deadline is closed (its pins go with it), as a streamed value's would be.
    const timer = pinned ? setTimeout(() => c.cut(`the client did not read a reply within ${c.door.config.requestTimeoutMs} ms`), c.door.config.requestTimeoutMs) : undefined;
    c.send(parts, () => {
      clearTimeout(timer);
      done.forEach((v) => v.release());
    });
    parts = [];
    sent = [];
    pinned = false;
  };
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!v) parts.push(replyNull(c.protocol));
    else if (v.parts) {
      parts.push(bulkHeader(v.length), ...v.parts, CRLF);
      sent.push(v);
      pinned = true;
    } else if (v.bytes) {
      parts.push(...bulkParts(v.bytes));
      sent.push(v);
    } else {
      flush();
      try {
        await v.stream!(c);
      } catch (e) {
        for (const rest of values.slice(i)) rest?.release();
        c.cut(`a ${v.length}-byte reply was cut short: ${(e as Error).message}`);
        throw new ReplyCut((e as Error).message);
      }
      v.release();
    }
  }
  flush();
}

function tenantOf(c: RespConnection): string {
  return c.tenant!;
}

/**
 * Stores a SET/MSET value argument as `key`'s value. A value the parser streamed into a writer is committed; one
 * it did not (an inline command's, or an empty one) is copied into staging and stored whole.
 */
async function storeValue(c: RespConnection, key: string, arg: Uint8Array, options: { expiresAt?: number; keepTtl?: boolean; nx?: boolean; xx?: boolean } = {}): Promise<boolean> {
  const writer = c.writerOf(arg);
  if (writer) return c.door.commitValue(tenantOf(c), key, writer, options);
  if (arg.length > c.door.config.maxBulkBytes) fail(`ERR value of ${arg.length} bytes is over the limit of ${c.door.config.maxBulkBytes}`);
  if (!arg.length) return c.door.setValue(tenantOf(c), key, arg, options);
  const slice = await c.door.staging.allocate(arg.length, c.door.config.requestTimeoutMs);
  try {
    slice.bytes.set(arg);
    return await c.door.setValue(tenantOf(c), key, slice.bytes, options);
  } finally {
    c.door.staging.release(slice);
  }
}

function errorOf(e: unknown): string {
  if (e instanceof ReplyError) return e.message;
  if (e instanceof TierSyncError) {
    if (e.code === 'ERR_TIER_FULL') return `OOM ${e.message}`;
    if (e.message.startsWith('ERR ')) return e.message;
    return `ERR ${e.message}`;
  }
  return `ERR ${(e as Error).message}`;
}

function set(c: RespConnection, args: Uint8Array[]): void | Promise<void> {
  const key = c.key(args[1]!);
  let expiresAt = 0;
  let nx = false;
  let xx = false;
  let keepTtl = false;
  let withGet = false;
  for (let i = 3; i < args.length; i++) {
    const opt = upper(args[i]);
    if (opt === 'NX' && !xx) nx = true;
    else if (opt === 'XX' && !nx) xx = true;
    else if (opt === 'KEEPTTL' && !expiresAt) keepTtl = true;
    else if (opt === 'GET') withGet = true;
    else if ((opt === 'EX' || opt === 'PX' || opt === 'EXAT' || opt === 'PXAT') && !expiresAt && !keepTtl && i + 1 < args.length) {
      const n = integerArg(args[++i]);
      if (n <= 0) fail("ERR invalid expire time in 'set' command");
      expiresAt = opt === 'EX' ? Date.now() + n * 1000 : opt === 'PX' ? Date.now() + n : opt === 'EXAT' ? n * 1000 : n;
    } else fail('ERR syntax error');
  }
  if (!withGet) {
    // A value received into first-tier slots and committed there as it arrived: acknowledged in this turn.
    const writer = c.writerOf(args[2]!);
    const done = writer && c.door.commitValueNow(tenantOf(c), key, writer, { expiresAt, keepTtl, nx, xx });
    if (done !== undefined) {
      c.send([done ? OK : replyNull(c.protocol)]);
      return;
    }
  }
  return setSlow(c, key, args[2]!, { expiresAt, keepTtl, nx, xx }, withGet);
}

async function setSlow(c: RespConnection, key: string, arg: Uint8Array, options: { expiresAt: number; keepTtl: boolean; nx: boolean; xx: boolean }, withGet: boolean): Promise<void> {
  let previous: ReadValue | null = null;
  if (withGet) previous = (await c.door.getValues(tenantOf(c), [key]))[0] ?? null;
  let done: boolean;
  try {
    done = await storeValue(c, key, arg, options);
  } catch (e) {
    previous?.release();
    throw e;
  }
  if (withGet) await sendValues(c, [previous], false);
  else c.send([done ? OK : replyNull(c.protocol)]);
}

async function mset(c: RespConnection, args: Uint8Array[]): Promise<void> {
  if (args.length % 2 !== 1) fail("ERR wrong number of arguments for 'mset' command");
  const keys: string[] = [];
  for (let i = 1; i < args.length; i += 2) keys.push(c.key(args[i]!));
  // MSET is atomic in Redis; here each key is set on its own, all stored before the reply.
  const results = await Promise.allSettled(keys.map((k, j) => storeValue(c, k, args[2 + 2 * j]!)));
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  c.send([OK]);
}

function info(c: RespConnection, args: Uint8Array[]): void {
  const d = c.door;
  const s = d.stats();
  const mem = process.memoryUsage();
  const sections: Record<string, Array<[string, string | number]>> = {
    server: [
      ['redis_version', '7.0.0'],
      ['tiersync_version', d.version],
      ['redis_mode', 'standalone'],
      ['os', `${process.platform} ${process.arch}`],
      ['process_id', process.pid],
      ['tcp_port', d.port],
      ['tiersync_resp_engine', s.engine],
      ['uptime_in_seconds', Math.floor((Date.now() - d.startedAt) / 1000)],
    ],
    clients: [
      ['connected_clients', s.clients],
      ['maxclients', d.config.maxClients],
    ],
    memory: [
      ['used_memory', mem.rss],
      ['used_memory_rss', mem.rss],
      ['tiersync_staging_used_bytes', s.stagingUsedBytes],
      ['tiersync_staging_capacity_bytes', s.stagingCapacityBytes],
      ['tiersync_value_bytes', s.valueBytes],
      ['maxmemory', 0],
    ],
    persistence: [['loading', 0]],
    stats: [
      ['total_connections_received', s.connectionsTotal],
      ['total_commands_processed', s.commandsTotal + (s.nativeGets ?? 0) + (s.nativeExists ?? 0) + (s.nativeMgets ?? 0)],
      ['rejected_connections', s.rejectedConnections],
      ['tiersync_auth_failures', s.authFailures],
      ['tiersync_landed_sets', s.landedSets ?? 0],
      ['tiersync_native_gets', s.nativeGets ?? 0],
      ['tiersync_native_exists', s.nativeExists ?? 0],
      ['tiersync_native_mgets', s.nativeMgets ?? 0],
      ['tiersync_protocol_errors', s.protocolErrors],
      ['tiersync_orphaned_pages', s.orphanedPages],
    ],
    replication: [
      ['role', 'master'],
      ['connected_slaves', 0],
    ],
    keyspace: [],
  };
  const ks = d.keyspace(tenantOf(c));
  if (ks.size) sections.keyspace!.push(['db0', `keys=${ks.size},expires=0,avg_ttl=0`]);
  const want = args.slice(1).map((a) => text(a).toLowerCase());
  const all = !want.length || want.includes('all') || want.includes('everything') || want.includes('default');
  const out: string[] = [];
  for (const [name, fields] of Object.entries(sections)) {
    if (!all && !want.includes(name)) continue;
    out.push(`# ${name[0]!.toUpperCase()}${name.slice(1)}`, ...fields.map(([k, v]) => `${k}:${v}`), '');
  }
  c.send([replyVerbatim(c.protocol, 'txt', out.join('\r\n'))]);
}

function scan(c: RespConnection, args: Uint8Array[]): void {
  const cursorText = text(args[1]);
  if (!/^\d{1,16}$/.test(cursorText)) fail('ERR invalid cursor');
  let count = 10;
  let match: string | undefined;
  let type: string | undefined;
  for (let i = 2; i < args.length; i++) {
    const opt = upper(args[i]);
    if (i + 1 >= args.length) fail('ERR syntax error');
    if (opt === 'COUNT') {
      count = integerArg(args[++i]);
      if (count < 1) fail('ERR syntax error');
    } else if (opt === 'MATCH') match = text(args[++i]);
    else if (opt === 'TYPE') type = text(args[++i]).toLowerCase();
    else fail('ERR syntax error');
  }
  const r = type !== undefined && type !== 'string' ? { cursor: 0, keys: [] } : c.door.scan(tenantOf(c), Number(cursorText), Math.min(count, 100_000), match);
  c.send([encodeArrayHeader(2), encodeBulk(String(r.cursor)), bulkArray(r.keys)]);
}

/**
 * HELLO [protover [AUTH user pass] [SETNAME name]], in Redis 7's order: version checked (-NOPROTO outside 2..3),
 * options parsed, AUTH done, NOAUTH if still unauthenticated, name set, then the protocol switched (a failed
 * HELLO leaves it as it was) and the server's properties sent: a map of 7 entries in RESP3, a flat array of 14
 * in RESP2 (what redis-server 7.0 answers). HELLO without a version keeps the current protocol.
 */
function hello(c: RespConnection, args: Uint8Array[]): void {
  let version = 0;
  if (args.length > 1) {
    const v = text(args[1]);
    if (!/^[-+]?\d{1,18}$/.test(v)) fail('ERR Protocol version is not an integer or out of range');
    version = Number(v);
    if (version < 2 || version > 3) fail('NOPROTO unsupported protocol version');
  }
  let credentials: [Uint8Array, Uint8Array] | undefined;
  let name: Uint8Array | undefined;
  for (let i = 2; i < args.length; i++) {
    const opt = upper(args[i]);
    const more = args.length - 1 - i;
    if (opt === 'AUTH' && more >= 2) {
      credentials = [args[i + 1]!, args[i + 2]!];
      i += 2;
    } else if (opt === 'SETNAME' && more >= 1) name = args[++i]!;
    else fail(`ERR Syntax error in HELLO option '${text(args[i])}'`);
  }
  if (credentials) auth(c, [args[0]!, ...credentials], false);
  if (!c.tenant) fail('NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time');
  if (name) setName(c, name);
  if (version) c.protocol = version as 2 | 3;
  const fields: Array<[string, string | number | Buffer]> = [
    ['server', 'redis'],
    ['version', REDIS_VERSION],
    ['proto', c.protocol],
    ['id', c.id],
    ['mode', 'standalone'],
    ['role', 'master'],
    ['modules', EMPTY_ARRAY],
  ];
  c.send([replyMapHeader(c.protocol, fields.length), ...fields.flatMap(([k, v]) => [encodeBulk(k), typeof v === 'number' ? encodeInteger(v) : Buffer.isBuffer(v) ? v : encodeBulk(v)])]);
}

/** The Redis version the door answers as (HELLO, INFO): the Redis 7 command set and replies it follows. */
const REDIS_VERSION = '7.0.0';

/** CLIENT SETNAME / HELLO SETNAME: Redis 7 accepts only characters '!'..'~' (no spaces or newlines). */
function setName(c: RespConnection, name: Uint8Array): void {
  for (const b of name) if (b < 0x21 || b > 0x7e) fail('ERR Client names cannot contain spaces, newlines or special characters.');
  c.name = text(name);
}

/** AUTH [user] password. `reply` false: called from HELLO, which replies itself. */
function auth(c: RespConnection, args: Uint8Array[], reply = true): void {
  const d = c.door;
  const user = args.length === 3 ? text(args[1]) : 'default';
  const password = text(args[args.length - 1]);
  if (args.length === 2 && !d.hasPassword('default')) {
    fail('ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?');
  }
  // With no AUTH configured, the default user takes any password, as Redis's `nopass` default user does
  // (clients that always send credentials, e.g. HELLO 3 AUTH default x, connect as they would to Redis).
  const tenant = !d.requiresAuth && user === 'default' ? 'default' : d.authenticate(user, password);
  if (!tenant) {
    if (++c.authFailures >= 10) c.abort('too many failed AUTH attempts');
    fail('WRONGPASS invalid username-password pair or user is disabled.');
  }
  c.authenticated(tenant!);
  if (reply) c.send([OK]);
}

function command(c: RespConnection, args: Uint8Array[]): void {
  const sub = upper(args[1]);
  const info = (name: string) => {
    const s = COMMANDS.get(name)!;
    return Buffer.concat([encodeArrayHeader(6), encodeBulk(name.toLowerCase()), encodeInteger(s.arity), replySetHeader(c.protocol, s.flags.length), ...s.flags.map((f) => encodeSimple(f)), ...s.keys.map((k) => encodeInteger(k))]);
  };
  if (!sub) return c.send([encodeArrayHeader(COMMANDS.size), ...[...COMMANDS.keys()].map(info)]);
  if (sub === 'COUNT') return c.send([encodeInteger(COMMANDS.size)]);
  if (sub === 'LIST') return c.send([bulkArray([...COMMANDS.keys()].map((k) => k.toLowerCase()))]);
  if (sub === 'INFO') {
    const names = args.slice(2).map(upper);
    return c.send([encodeArrayHeader(names.length), ...names.map((n) => (COMMANDS.has(n) ? info(n) : replyNull(c.protocol)))]);
  }
  // COMMAND DOCS (redis-cli asks for it for its hints): no docs, an empty map.
  if (sub === 'DOCS') return c.send([replyMapHeader(c.protocol, 0)]);
  fail(`ERR unknown subcommand '${text(args[1])}'. Try COMMAND HELP.`);
}

/** CONFIG GET answers for the few parameters clients ask about (redis-benchmark asks for save and appendonly). */
function config(c: RespConnection, args: Uint8Array[]): void {
  const sub = upper(args[1]);
  if (sub !== 'GET') fail(sub === 'SET' || sub === 'RESETSTAT' || sub === 'REWRITE' ? `ERR CONFIG ${sub} is not supported by the tiersync RESP door` : `ERR unknown subcommand '${text(args[1])}'. Try CONFIG HELP.`);
  if (args.length < 3) fail("ERR wrong number of arguments for 'config|get' command");
  const d = c.door.config;
  const params: Record<string, string> = {
    save: '',
    appendonly: 'no',
    maxmemory: '0',
    maxclients: String(d.maxClients),
    'proto-max-bulk-len': String(d.maxBulkBytes),
    'client-query-buffer-limit': String(d.maxPendingBytes),
    timeout: String(Math.floor(d.idleTimeoutMs / 1000)),
    databases: '1',
    port: String(c.door.port),
    bind: d.host,
  };
  const out: string[] = [];
  for (const pattern of args.slice(2).map((a) => text(a).toLowerCase())) {
    for (const [k, v] of Object.entries(params)) if (globMatch(pattern, k) && !out.includes(k)) out.push(k, v);
  }
  c.send([replyMapHeader(c.protocol, out.length / 2), ...out.map((x) => encodeBulk(Buffer.from(x, 'latin1')))]);
}

/** KEYS pattern: every key of the caller's tenant matching the glob (LMCache's docs list its keys this way). */
function keysCommand(c: RespConnection, args: Uint8Array[]): void {
  const pattern = text(args[1]);
  const out: string[] = [];
  let cursor = 0;
  do {
    const r = c.door.scan(tenantOf(c), cursor, 100_000, pattern === '*' ? undefined : pattern);
    out.push(...r.keys);
    cursor = r.cursor;
  } while (cursor !== 0);
  c.send([bulkArray(out)]);
}

function client(c: RespConnection, args: Uint8Array[]): void {
  const sub = upper(args[1]);
  if (sub === 'SETNAME' && args.length === 3) {
    setName(c, args[2]!);
    return c.send([OK]);
  }
  if (sub === 'GETNAME') return c.send([c.name ? encodeBulk(c.name) : replyNull(c.protocol)]);
  if (sub === 'ID') return c.send([encodeInteger(c.id)]);
  if (sub === 'SETINFO' && args.length === 4) return c.send([OK]);
  if (sub === 'INFO') return c.send([replyVerbatim(c.protocol, 'txt', `id=${c.id} addr=${c.socket.remoteAddress}:${c.socket.remotePort} name=${c.name} db=0 user=${c.tenant ?? ''} resp=${c.protocol}\n`)]);
  fail(`ERR unknown subcommand or wrong number of arguments for '${text(args[1])}'. Try CLIENT HELP.`);
}

const spec = (arity: number, flags: string[], keys: [number, number, number], run: Handler, open = false): CommandSpec => ({ arity, flags, keys, run, open });
const NO_KEYS: [number, number, number] = [0, 0, 0];

const COMMANDS = new Map<string, CommandSpec>([
  ['PING', spec(-1, ['fast'], NO_KEYS, (c, a) => c.send([a.length > 2 ? fail("ERR wrong number of arguments for 'ping' command") : a.length === 2 ? encodeBulk(a[1]!) : PONG]))],
  ['ECHO', spec(2, ['fast'], NO_KEYS, (c, a) => c.send([encodeBulk(a[1]!)]))],
  ['AUTH', spec(-2, ['noscript', 'loading', 'stale', 'fast', 'no_auth'], NO_KEYS, (c, a) => (a.length > 3 ? fail('ERR syntax error') : auth(c, a)), true)],
  ['HELLO', spec(-1, ['noscript', 'loading', 'stale', 'fast', 'no_auth'], NO_KEYS, hello, true)],
  ['QUIT', spec(-1, ['fast', 'no_auth'], NO_KEYS, (c) => {
    c.send([OK]);
    c.shutdown();
  }, true)],
  ['SELECT', spec(2, ['loading', 'stale', 'fast'], NO_KEYS, (c, a) => c.send([integerArg(a[1]) === 0 ? OK : fail('ERR DB index is out of range')]))],
  ['GET', spec(2, ['readonly', 'fast'], [1, 1, 1], async (c, a) => sendValues(c, await c.door.getValues(tenantOf(c), [c.key(a[1]!)]), false))],
  ['MGET', spec(-2, ['readonly', 'fast'], [1, -1, 1], async (c, a) => sendValues(c, await c.door.getValues(tenantOf(c), a.slice(1).map((k) => c.key(k))), true))],
  ['KEYS', spec(2, ['readonly'], NO_KEYS, keysCommand)],
  ['SET', spec(-3, ['write', 'denyoom'], [1, 1, 1], set)],
  ['MSET', spec(-3, ['write', 'denyoom'], [1, -1, 2], mset)],
  ['EXISTS', spec(-2, ['readonly', 'fast'], [1, -1, 1], (c, a) => c.send([encodeInteger(c.door.exists(tenantOf(c), a.slice(1).map((k) => c.key(k))))]))],
  ['DEL', spec(-2, ['write'], [1, -1, 1], async (c, a) => c.send([encodeInteger(await c.door.deleteKeys(tenantOf(c), a.slice(1).map((k) => c.key(k))))]))],
  ['UNLINK', spec(-2, ['write', 'fast'], [1, -1, 1], async (c, a) => c.send([encodeInteger(await c.door.deleteKeys(tenantOf(c), a.slice(1).map((k) => c.key(k))))]))],
  ['STRLEN', spec(2, ['readonly', 'fast'], [1, 1, 1], (c, a) => c.send([encodeInteger(c.door.entry(tenantOf(c), c.key(a[1]!))?.length ?? 0)]))],
  ['TYPE', spec(2, ['readonly', 'fast'], [1, 1, 1], (c, a) => c.send([encodeSimple(c.door.entry(tenantOf(c), c.key(a[1]!)) ? 'string' : 'none')]))],
  ['PTTL', spec(2, ['readonly', 'fast'], [1, 1, 1], (c, a) => c.send([encodeInteger(ttl(c, a[1]!, 1))]))],
  ['TTL', spec(2, ['readonly', 'fast'], [1, 1, 1], (c, a) => c.send([encodeInteger(ttl(c, a[1]!, 1000))]))],
  ['SCAN', spec(-2, ['readonly'], NO_KEYS, scan)],
  ['DBSIZE', spec(1, ['readonly', 'fast'], NO_KEYS, (c) => c.send([encodeInteger(c.door.keyspace(tenantOf(c)).size)]))],
  ['FLUSHDB', spec(-1, ['write'], NO_KEYS, async (c) => {
    await c.door.flush(tenantOf(c));
    c.send([OK]);
  })],
  ['FLUSHALL', spec(-1, ['write'], NO_KEYS, async (c) => {
    // Only the caller's tenant: one tenant can never clear another's keys.
    await c.door.flush(tenantOf(c));
    c.send([OK]);
  })],
  ['INFO', spec(-1, ['loading', 'stale'], NO_KEYS, info)],
  ['COMMAND', spec(-1, ['loading', 'stale'], NO_KEYS, command)],
  ['CONFIG', spec(-2, ['admin', 'noscript', 'loading', 'stale'], NO_KEYS, config)],
  ['CLIENT', spec(-2, ['noscript', 'loading', 'stale'], NO_KEYS, client)],
]);

function ttl(c: RespConnection, key: Uint8Array, unit: number): number {
  const e = c.door.entry(tenantOf(c), c.key(key));
  if (!e) return -2;
  if (!e.expiresAt) return -1;
  return Math.max(0, Math.round((e.expiresAt - Date.now()) / unit));
}

/** Runs one command and queues its reply (an error reply when it fails; nothing here throws). */
export function executeCommand(c: RespConnection, args: Uint8Array[]): void | Promise<void> {
  const name = upper(args[0]);
  const s = COMMANDS.get(name);
  const start = process.hrtime.bigint();
  const label = s ? name.toLowerCase() : 'other';
  let pending: void | Promise<void>;
  try {
    if (!s) {
      const preview = args
        .slice(1, 4)
        .map((a) => `'${text(a).slice(0, 64)}' `)
        .join('');
      fail(`ERR unknown command '${text(args[0]).slice(0, 128)}', with args beginning with: ${preview}`);
    }
    if (!c.tenant && !s!.open) fail('NOAUTH Authentication required.');
    if ((s!.arity > 0 && args.length !== s!.arity) || (s!.arity < 0 && args.length < -s!.arity)) fail(`ERR wrong number of arguments for '${name.toLowerCase()}' command`);
    pending = s!.run(c, args);
  } catch (e) {
    commandFailed(c, name, label, start, e);
    return;
  }
  // A command answered in this turn (e.g. a SET committed as its bytes arrived) costs no promise.
  if (!pending) {
    c.door.countCommand(label, false, Number(process.hrtime.bigint() - start) / 1e9);
    return;
  }
  return pending.then(
    () => c.door.countCommand(label, false, Number(process.hrtime.bigint() - start) / 1e9),
    (e: unknown) => commandFailed(c, name, label, start, e),
  );
}

/** Answers a failed command with its error (none for a reply already cut) and counts it. */
function commandFailed(c: RespConnection, name: string, label: string, start: bigint, e: unknown): void {
  if (!(e instanceof ReplyCut)) {
    if (!(e instanceof ReplyError) && !(e instanceof TierSyncError)) c.door.log?.error({ err: e, command: name }, 'RESP command failed');
    c.send([encodeError(errorOf(e))]);
  }
  c.door.countCommand(label, true, Number(process.hrtime.bigint() - start) / 1e9);
}
