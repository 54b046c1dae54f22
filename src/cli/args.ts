import { parseArgs, type ParseArgsConfig } from "node:util";
import type { Backend } from "../backend/contract.js";
import { openBackend, type OpenBackendOptions } from "../backend/open.js";
import { shown } from "../core/checks.js";
import { ConveyorError } from "../core/errors.js";
import { consoleLogger, type Logger } from "../core/logger.js";

/** A usage mistake: printed with the command's help, exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

export type Options = NonNullable<ParseArgsConfig["options"]>;

export const DB_OPTION: Options = {
  db: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
};

/**
 * String options where an empty value means something: `--db ''` falls back to CONVEYOR_DB as an
 * absent one does, and an empty prefix or base path puts names and routes at the top level.
 */
const EMPTY_MEANS_SOMETHING = new Set(["db", "stream-prefix", "topic-prefix", "base-path"]);

export function parse(argv: string[], options: Options) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: { ...DB_OPTION, ...options }, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  // An empty value is usually an unset shell variable (--queue "$QUEUE"): taken as given it
  // would match nothing, or name a queue nobody reads, and the command would still "succeed".
  for (const [name, value] of Object.entries(parsed.values)) {
    if (EMPTY_MEANS_SOMETHING.has(name)) continue;
    for (const one of Array.isArray(value) ? value : [value]) {
      if (typeof one === "string" && one.trim() === "") throw new UsageError(`--${name} is empty: give it a value, or leave the option out`);
    }
  }
  return parsed;
}

/**
 * The subcommand a command such as `conveyor jobs` starts with, checked before anything is
 * opened; undefined when none is given (the caller prints its help).
 */
export function subcommand<S extends string>(command: string, argv: string[], known: readonly S[]): S | undefined {
  const first = argv[0];
  if (first === undefined) return undefined;
  const choices = `${known.slice(0, -1).join(", ")} or ${known.at(-1)!}`;
  // "conveyor jobs --db x ls" would otherwise take "--db" for the subcommand and "x" for an id.
  if (first.startsWith("-")) throw new UsageError(`the subcommand comes first: conveyor ${command} SUBCOMMAND [options], one of ${choices}`);
  if (!(known as readonly string[]).includes(first)) throw new UsageError(`unknown subcommand "${command} ${first}"; use ${choices}`);
  return first as S;
}

/** `--db`, else `CONVEYOR_DB`. */
export function dbUrl(value: unknown): string {
  const url = typeof value === "string" && value ? value : process.env.CONVEYOR_DB;
  if (!url) throw new UsageError("no database: pass --db sqlite:PATH, postgres://…, redis://… or amqp://… (or set CONVEYOR_DB)");
  return url;
}

/**
 * Runs `work` on the store `url` names, with a SQLite file that cannot be opened reported as one
 * line naming the --db value and what is wrong with it (better-sqlite3's errors name neither the
 * path nor a fix, and some surface only at the first query).
 */
export async function namingSqliteProblems<T>(url: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const problem = sqliteOpenProblem(error);
    if (problem === null) throw error;
    throw new ConveyorError(`--db ${url}: ${problem}`, { cause: error });
  }
}

export async function openStore(url: string, options: OpenBackendOptions = {}): Promise<Backend> {
  return namingSqliteProblems(url, () => openBackend(url, options));
}

function sqliteOpenProblem(error: unknown): string | null {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : "";
  if (error instanceof TypeError && /directory does not exist/.test(message)) return "the directory does not exist: create it, or fix the path";
  if (code === "SQLITE_NOTADB") return "the file is not a SQLite database: name a new file or an existing Conveyor database";
  // SQLite says only "unable to open database file" for a directory and for a file it may not read and write.
  if (code === "SQLITE_CANTOPEN") return "cannot open the path as a file: it is a directory, or not readable and writable; name a SQLite file";
  return null;
}

/**
 * The store's log of a one-shot command: its warnings (a data layout upgraded in place, which is
 * said once) and errors on stderr, but not Redis' reconnect notices, which the command's own
 * one-line error replaces when the store cannot be reached.
 */
const CONSOLE = consoleLogger();
const ONE_SHOT_LOGGER: Logger = {
  info: () => undefined,
  warn: (fields, message) => {
    if (!message.startsWith("Redis connection ")) CONSOLE.warn(fields, message);
  },
  error: (fields, message) => CONSOLE.error(fields, message),
};

/**
 * Runs a one-shot command on the store `--db` names. A store that cannot be reached fails it at
 * once with the command's one-line error (failFast), not after 10 s of reconnect warnings.
 */
export async function withBackend<T>(value: unknown, fn: (backend: Backend) => Promise<T>): Promise<T> {
  const backend = await openStore(dbUrl(value), { failFast: true, logger: ONE_SHOT_LOGGER });
  try {
    return await fn(backend);
  } finally {
    await backend.close();
  }
}

// Number() would also take "0x10", "1e3", "0b1" and " 7 ": an option reads as the person wrote it.
const DECIMAL_INTEGER = /^[+-]?\d+$/;
const DECIMAL_NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$/;

export function intOption(name: string, value: unknown, min = 0): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === "string" && DECIMAL_INTEGER.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`--${name} must be an integer >= ${min}; got ${shown(value)} (decimal digits only)`);
  }
  return n;
}

export function positiveNumberOption(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === "string" && DECIMAL_NUMBER.test(value) ? Number(value) : NaN;
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--${name} must be a positive number; got ${shown(value)}`);
  return n;
}

export function listOption(name: string, value: unknown): string[] {
  if (typeof value !== "string" || value.trim() === "") throw new UsageError(`--${name} is required`);
  return value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

export function requiredString(name: string, value: unknown): string {
  if (typeof value !== "string" || value === "") throw new UsageError(`--${name} is required`);
  return value;
}

/** A JSON option such as `--data`; absent: `fallback`. */
export function jsonOption<T>(name: string, value: unknown, fallback: T): T {
  if (value === undefined) return fallback;
  try {
    return JSON.parse(value as string) as T;
  } catch (error) {
    throw new UsageError(`--${name} is not valid JSON: ${(error as Error).message}`);
  }
}
