/**
 * Starting this folder's child processes (the crash child, the fault scenarios' helpers) the same way whether
 * the suite runs from TypeScript sources (vitest: the child is transpiled by the index crash test's module hooks)
 * or from the compiled dist (the CLI).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const fromSource = import.meta.url.endsWith('.ts');

/**
 * Spawns `node <this folder>/<name>.{ts|js} ...args` with stdout and stderr piped; `wrapper` runs node under
 * another command (e.g. `ip netns exec NS`).
 */
export function spawnModule(name: string, args: string[], wrapper: string[] = []): ChildProcess {
  const entry = fileURLToPath(new URL(`./${name}${fromSource ? '.ts' : '.js'}`, import.meta.url));
  const node = fromSource ? ['--conditions=source', '--import', fileURLToPath(new URL('./ts-loader.mjs', import.meta.url))] : [];
  const argv = [process.execPath, ...node, entry, ...args];
  const [command, ...rest] = [...wrapper, ...argv];
  return spawn(command!, rest, { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Resolves with the first stdout line equal to `line`; rejects when the child exits first or `ms` passes. */
export function waitForLine(child: ChildProcess, line: string, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => finish(new Error(`child printed no '${line}' within ${ms} ms: ${err.slice(-2000)}`)), ms);
    const onOut = (d: Buffer) => {
      out += d.toString();
      if (out.split('\n').includes(line)) finish();
    };
    const onErr = (d: Buffer) => (err += d.toString());
    const onExit = (code: number | null, signal: string | null) => finish(new Error(`child exited (${code ?? signal}) before '${line}': ${err.slice(-2000)}`));
    function finish(e?: Error) {
      clearTimeout(timer);
      child.stdout!.off('data', onOut);
      child.stderr!.off('data', onErr);
      child.off('exit', onExit);
      if (e) reject(e);
      else resolve();
    }
    child.stdout!.on('data', onOut);
    child.stderr!.on('data', onErr);
    child.on('exit', onExit);
  });
}

/** SIGKILLs the child and waits for it to be gone (at most `ms`). */
export function killAndWait(child: ChildProcess, ms = 10_000): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve({ code: child.exitCode, signal: child.signalCode });
    const timer = setTimeout(() => reject(new Error(`child ${child.pid} still alive ${ms} ms after SIGKILL`)), ms);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
    child.kill('SIGKILL');
  });
}

/** xorshift32 over [0, 1): a kill schedule or traffic that differs per cycle but is reproducible from the seed. */
export function seededRandom(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

/** How a kill cycle ended: SIGKILLed while working, exited by itself first, or never became ready. */
export type KillOutcome = { kind: 'killed' } | { kind: 'exited'; detail: string } | { kind: 'not-started'; detail: string; hang: boolean };

/**
 * One crash cycle: starts child module `name`, waits (at most `readyMs`) for its `ready` line, lets it work for
 * `workMs`, then SIGKILLs it and waits until it is gone.
 */
export async function killCycle(name: string, args: string[], o: { readyMs: number; workMs: number }): Promise<KillOutcome> {
  const child = spawnModule(name, args);
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  try {
    await waitForLine(child, 'ready', o.readyMs);
  } catch (e) {
    await killAndWait(child).catch(() => undefined);
    const detail = (e as Error).message;
    return { kind: 'not-started', detail, hang: /within/.test(detail) };
  }
  child.stdout!.resume();
  await new Promise((r) => setTimeout(r, o.workMs));
  const exit = await killAndWait(child);
  return exit.signal === 'SIGKILL' ? { kind: 'killed' } : { kind: 'exited', detail: `${exit.code ?? exit.signal}: ${stderr.slice(-1500)}` };
}

/** Options of a scenario that kills a child process in cycles (crash, index-loss); each scenario has its defaults. */
export interface KillLoopOptions {
  /** Kill cycles. */
  cycles?: number;
  /** Folder for the tiers, index and journal (removed afterwards unless given). Default: a new temp folder. */
  dir?: string;
  /** Seed of the kill moments and of each child's traffic. Default 1. */
  seed?: number;
  /** A kill lands uniformly in [minKillMs, maxKillMs] after the child reported ready. */
  minKillMs?: number;
  maxKillMs?: number;
  log?: (line: string) => void;
}
