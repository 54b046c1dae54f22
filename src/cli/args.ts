import { parseArgs, type ParseArgsConfig } from "node:util";
import type { Backend } from "../backend/contract.js";
import { openBackend } from "../backend/open.js";
import { shown } from "../core/checks.js";

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

export function parse(argv: string[], options: Options) {
  try {
    return parseArgs({ args: argv, options: { ...DB_OPTION, ...options }, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** `--db`, else `CONVEYOR_DB`. */
export function dbUrl(value: unknown): string {
  const url = typeof value === "string" && value ? value : process.env.CONVEYOR_DB;
  if (!url) throw new UsageError("no database: pass --db sqlite:PATH, postgres://…, redis://… or amqp://… (or set CONVEYOR_DB)");
  return url;
}

export async function withBackend<T>(value: unknown, fn: (backend: Backend) => Promise<T>): Promise<T> {
  const backend = await openBackend(dbUrl(value));
  try {
    return await fn(backend);
  } finally {
    await backend.close();
  }
}

export function intOption(name: string, value: unknown, min = 0): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (typeof value !== "string" || value.trim() === "" || !Number.isInteger(n) || n < min) {
    throw new UsageError(`--${name} must be an integer >= ${min}; got ${shown(value)}`);
  }
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
