/**
 * A progress bar on stderr (stdout stays clean for `--json`). On a terminal it redraws one line; otherwise it
 * prints a line at every 10% so logs stay short.
 */

/** What a sweep reports progress to. */
export interface Progress {
  /** One more job finished. */
  tick(): void;
  /** Ends the bar (prints the final state and a newline on a terminal). */
  done(): void;
}

/** A progress bar over `total` jobs; `stream` defaults to process.stderr. */
export function progressBar(total: number, label = 'sim', stream: NodeJS.WriteStream = process.stderr): Progress {
  const start = Date.now();
  const tty = stream.isTTY === true;
  let n = 0;
  let lastDecile = -1;
  const line = () => {
    const width = 30;
    const filled = total ? Math.round((n / total) * width) : width;
    const pct = total ? Math.floor((n / total) * 100) : 100;
    const secs = ((Date.now() - start) / 1000).toFixed(1);
    return `${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${n}/${total} jobs ${pct}% ${secs}s`;
  };
  return {
    tick() {
      n++;
      if (tty) stream.write(`\r${line()}`);
      else {
        const decile = total ? Math.floor((n / total) * 10) : 10;
        if (decile !== lastDecile) {
          lastDecile = decile;
          stream.write(`${line()}\n`);
        }
      }
    },
    done() {
      if (tty) stream.write(`\r${line()}\n`);
    },
  };
}

/** A progress sink that prints nothing. */
export const silentProgress: Progress = { tick() {}, done() {} };
