/**
 * Append-only, fsynced JSON-lines logs: the chaos run's evidence.
 *
 * Every record is one `write(2)` of a whole line followed by `fsync(2)` before the caller goes
 * on, so what the producer and the handlers claim happened is on disk before the queue can act
 * on it (a handler's "end" record is durable before the worker acknowledges the job). A process
 * SIGKILLed between two records leaves whole lines only; the reader still tolerates and counts a
 * torn last line rather than silently dropping it.
 */
import { closeSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

export class AppendLog {
  private fd: number | null;

  constructor(readonly path: string) {
    this.fd = openSync(path, "a");
  }

  get closed(): boolean {
    return this.fd === null;
  }

  /** Appends one record and fsyncs it. */
  append(record: object): void {
    if (this.fd === null) throw new Error(`ledger ${this.path} is closed`);
    const line = Buffer.from(JSON.stringify(record) + "\n");
    let off = 0;
    while (off < line.length) off += writeSync(this.fd, line, off, line.length - off);
    fsyncSync(this.fd);
  }

  close(): void {
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
  }
}

export interface ReadResult<T> {
  records: T[];
  /** Lines that did not parse (a torn write): reported, never silently dropped. */
  torn: number;
}

/** Reads a JSON-lines file; a missing file reads as empty. */
export function readLog<T>(path: string): ReadResult<T> {
  if (!existsSync(path)) return { records: [], torn: 0 };
  const records: T[] = [];
  let torn = 0;
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    try {
      records.push(JSON.parse(line) as T);
    } catch {
      torn++;
    }
  }
  return { records, torn };
}

/** Reads every file in `dir` whose name matches `pattern`, concatenated. */
export function readLogs<T>(dir: string, pattern: RegExp): ReadResult<T> {
  const out: ReadResult<T> = { records: [], torn: 0 };
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir).sort()) {
    if (!pattern.test(name)) continue;
    const r = readLog<T>(join(dir, name));
    out.records.push(...r.records);
    out.torn += r.torn;
  }
  return out;
}
