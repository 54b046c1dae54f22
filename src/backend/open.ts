/**
 * Turns a backend URL (the CLI's `--db`, `CONVEYOR_DB`) into a Backend.
 *
 * Backends are imported on demand, so a user who never opens SQLite never needs better-sqlite3
 * installed (it is an optional peer dependency).
 */
import type { Backend } from "./contract.js";
import type { Clock } from "../core/clock.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";

/** Options of {@link openBackend}. */
export interface OpenBackendOptions {
  /** Source of "now" for the backend. Default: the system clock. */
  clock?: Clock;
}

const SUPPORTED =
  "supported: sqlite:PATH (e.g. sqlite:./jobs.db or sqlite:/var/lib/app/jobs.db), sqlite::memory:, " +
  "or a file path ending in .db, .sqlite or .sqlite3";

/**
 * Opens the backend a URL names:
 * - `sqlite:PATH`: a SQLite file, created and migrated if missing;
 * - `sqlite::memory:`: a private in-memory SQLite store (this process only);
 * - a bare path ending in `.db`, `.sqlite` or `.sqlite3`: the same as `sqlite:PATH`.
 *
 * Throws InvalidInputError for anything else.
 */
export async function openBackend(url: string, options: OpenBackendOptions = {}): Promise<Backend> {
  const path = sqlitePath(url);
  const { SqliteBackend } = await importSqlite();
  try {
    return new SqliteBackend({ path, ...(options.clock ? { clock: options.clock } : {}) });
  } catch (error) {
    // better-sqlite3 loads its native addon on first use, so a binary built for another Node
    // version surfaces here rather than at import.
    if (error instanceof Error && /NODE_MODULE_VERSION|better_sqlite3\.node|bindings file/.test(error.message)) {
      throw new ConveyorError(
        `better-sqlite3's native module does not load in this Node.js (${process.version}): ` +
          `run "npm rebuild better-sqlite3" (needs g++, make and python3)`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** The SQLite path a URL names, or an InvalidInputError saying what is accepted. */
function sqlitePath(url: string): string {
  if (typeof url !== "string" || url.trim() === "") {
    throw new InvalidInputError(`no backend URL given; ${SUPPORTED}`);
  }
  if (url.startsWith("sqlite:")) {
    const path = url.slice("sqlite:".length);
    // "sqlite://x" reads as a URL with host "x" in some tools and as the path "//x" in others:
    // refuse it rather than guess.
    if (path.startsWith("//")) {
      throw new InvalidInputError(`write sqlite:PATH without "//"; ${SUPPORTED}`);
    }
    if (path === "") throw new InvalidInputError(`sqlite: needs a path; ${SUPPORTED}`);
    return path;
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== undefined) {
    // Only the scheme goes into the message: the rest of a server URL may hold a password.
    const later = ["postgres", "postgresql", "redis", "rediss"].includes(scheme);
    throw new InvalidInputError(
      later
        ? `${scheme}:// backends are not available in this build yet (Postgres and Redis backends are planned); ${SUPPORTED}`
        : `unsupported backend URL scheme "${scheme}://"; ${SUPPORTED}`,
    );
  }
  if (/\.(?:db|sqlite3?)$/i.test(url)) return url;
  throw new InvalidInputError(`cannot tell which backend ${JSON.stringify(url)} names; ${SUPPORTED}`);
}

async function importSqlite(): Promise<typeof import("./sqlite/index.js")> {
  try {
    return await import("./sqlite/index.js");
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === "ERR_MODULE_NOT_FOUND" && error instanceof Error && error.message.includes("better-sqlite3")) {
      throw new ConveyorError(
        "the SQLite backend needs the better-sqlite3 package, an optional peer dependency of Conveyor: " +
          "install better-sqlite3@12 (npm install better-sqlite3@12)",
        { cause: error },
      );
    }
    throw error;
  }
}
