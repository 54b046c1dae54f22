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

// The chaos short runs kill, stop and time worker processes against lease bounds: beside another
// test file on two cores one of them starved (an event loop blocked 3 s, a lease lost, a bound
// broken, one CI run in three). So they run as their own project, alone and last; every other
// file runs two at a time, which takes the rest of the suite from about 13 to 8 minutes.
const serialFiles = ["test/chaos/**/*.test.ts"];

export default defineConfig({
  resolve: { alias: packageNames },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Start throwaway servers unless DATABASE_URL / REDIS_URL name them; tests get the URLs via inject().
    globalSetup: ["test/setup/postgres.ts", "test/setup/redis.ts", "test/setup/rabbitmq.ts", "test/setup/kafka.ts"],
    projects: [
      {
        extends: true,
        test: { name: "parallel", include: ["test/**/*.test.ts"], exclude: serialFiles, maxWorkers: 2, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: "chaos", include: serialFiles, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
