import { fileURLToPath } from "node:url";
import ts from "typescript";
import { defineConfig } from "vitest/config";

// Tests import the examples, which import the package by name: resolve those names to the sources
// as tsconfig.json "paths" do for tsc and tsx (no build needed).
const paths = (
  ts.readConfigFile(fileURLToPath(new URL("./tsconfig.json", import.meta.url)), (path) => ts.sys.readFile(path)).config as {
    compilerOptions: { paths: Record<string, string[]> };
  }
).compilerOptions.paths;
const packageNames = Object.entries(paths).map(([name, [target]]) => ({
  find: new RegExp(`^${name.replace(/[/-]/g, "\\$&")}$`),
  replacement: fileURLToPath(new URL(target!, import.meta.url)),
}));

export default defineConfig({
  resolve: { alias: packageNames },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // One file at a time on two cores (vitest's default, cores - 1). Two at a time took the suite
    // from about 13 to 8 minutes, but a chaos short run beside another file starved its workers
    // (an event loop blocked 3 s, heartbeats late, a lease lost: a bound broken) in one CI run
    // out of three. Next step: the chaos files as their own project, run alone after the rest.
    pool: "forks",
    // Start throwaway servers unless DATABASE_URL / REDIS_URL name them; tests get the URLs via inject().
    globalSetup: ["test/setup/postgres.ts", "test/setup/redis.ts", "test/setup/rabbitmq.ts", "test/setup/kafka.ts"],
  },
});
