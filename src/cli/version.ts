import { readFileSync } from "node:fs";

/**
 * The installed package's version. The CLI runs from src/cli (a checkout) or dist/src/cli (the
 * package), so walk up to the first package.json instead of assuming a depth.
 */
export function packageVersion(): string {
  for (let dir = new URL("./", import.meta.url), depth = 0; depth < 5; dir = new URL("../", dir), depth++) {
    try {
      const pkg = JSON.parse(readFileSync(new URL("package.json", dir), "utf8")) as { name?: unknown; version?: unknown };
      if (pkg.name === "conveyor-jobs" && typeof pkg.version === "string") return pkg.version;
    } catch {
      // No package.json at this level: keep walking up.
    }
  }
  return "unknown";
}
