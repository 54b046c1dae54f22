/**
 * Reads a SQL backend's statements (`queries/<name>.sql`, one statement each, with the header
 * convention of src/backend/postgres/queries/) from the folder beside its compiled module: the
 * build copies them there (scripts/copy-assets.mjs), so source and compiled code read the same
 * files. One reader for SQLite and PostgreSQL, so a missing file says the same thing on both.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ConveyorError } from "../core/errors.js";

/**
 * The text of every statement in `names`, read from `dir` (a folder URL ending in `/`); a missing
 * one is a ConveyorError naming the file and the source folder (`folder`) the build must copy.
 */
export function readQueryFiles<N extends string>(dir: URL, names: readonly N[], store: string, folder: string): Record<N, string> {
  const files = {} as Record<N, string>;
  for (const name of names) {
    try {
      files[name] = readFileSync(new URL(`${name}.sql`, dir), "utf8");
    } catch (error) {
      throw new ConveyorError(
        `Conveyor's ${store} query ${name}.sql is missing from ${fileURLToPath(dir)}; the package build must copy ${folder} next to backend.js`,
        { cause: error },
      );
    }
  }
  return files;
}
