import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: files run in parallel forks; each test file uses its own database.
    pool: "forks",
    // Start throwaway servers unless DATABASE_URL / REDIS_URL name them; tests get the URLs via inject().
    globalSetup: ["test/setup/postgres.ts", "test/setup/redis.ts", "test/setup/rabbitmq.ts"],
  },
});
