import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ConveyorError } from "../core/errors.js";

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
