import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ConveyorError } from "../core/errors.js";

/**
 * The store's schema is newer than this code (another process already migrated it): one type for
 * every SQL backend, so callers need not know which store refused.
 */
export class SchemaTooNewError extends ConveyorError {
  override name = "SchemaTooNewError";
  constructor(
    /** The store's name for the schema: a PostgreSQL schema, a SQLite file. */
    readonly schema: string,
    readonly databaseVersion: number,
    readonly codeVersion: number,
  ) {
    super(
      `the Conveyor schema "${schema}" is at version ${databaseVersion}, newer than this Conveyor knows ` +
        `(up to ${codeVersion}); upgrade conveyor in this process (another process already migrated the ` +
        `database), or point it at another schema`,
    );
  }
}

/** The store's schema is missing or older than this code: run the migrations. */
export class SchemaOutdatedError extends ConveyorError {
  override name = "SchemaOutdatedError";
  constructor(
    readonly schema: string,
    readonly databaseVersion: number,
    readonly codeVersion: number,
  ) {
    super(
      databaseVersion === 0
        ? `the Conveyor schema "${schema}" does not exist yet; call \`await backend.migrate()\` at startup or ` + `run \`conveyor migrate --db …\``
        : `the Conveyor schema "${schema}" is at version ${databaseVersion}, this Conveyor needs ${codeVersion}; ` +
            `call \`await backend.migrate()\` at startup or run \`conveyor migrate --db …\``,
    );
  }
}

/** One numbered migration file, as read from disk (placeholders not yet substituted). */
export interface MigrationFile {
  version: number;
  file: string;
  text: string;
}

/**
 * Reads a backend's numbered migrations (`NNNN_name.sql`) from `dir`, in order, refusing gaps and
 * stray files. The build copies each `migrations/` folder to dist, so source and compiled code
 * read the same files. `backend` and `module` only shape the error messages.
 */
export function readMigrationFiles(dir: URL, backend: string, module: string): MigrationFile[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((f) => f.endsWith(".sql"));
  } catch (error) {
    throw new ConveyorError(
      `Conveyor's ${backend} migrations are missing from ${fileURLToPath(dir)}; the package build must copy ` +
        `src/backend/${module} migrations next to the compiled backend`,
      { cause: error },
    );
  }
  const files = names
    .map((file) => {
      const match = /^(\d+)_[\w-]+\.sql$/.exec(file);
      if (match === null) {
        throw new ConveyorError(`unexpected file ${file} in ${fileURLToPath(dir)}; migrations are named NNNN_name.sql`);
      }
      return { version: Number(match[1]), file, text: readFileSync(new URL(file, dir), "utf8") };
    })
    .sort((a, b) => a.version - b.version);
  files.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw new ConveyorError(`${backend} migrations must be numbered 1, 2, 3… without gaps; found ${m.file} at position ${i + 1}`);
    }
  });
  return files;
}

/**
 * True when `error` (or an error in its cause chain) says the store was upgraded past this code
 * (a SchemaTooNewError, RedisLayoutTooNewError included): not retryable, and a worker must stop.
 */
export function isStoreTooNew(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; depth++) {
    if (e instanceof SchemaTooNewError) return true;
    e = e.cause;
  }
  return false;
}
