// Copies what tsc does not: SQL migrations and Lua scripts, next to the compiled modules that load them.
import { cpSync, existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      if (name === "migrations" || name === "lua" || name === "queries") cpSync(path, join("dist", path), { recursive: true });
      else walk(path);
    }
  }
}
if (existsSync("src")) walk("src");
