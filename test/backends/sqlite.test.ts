import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { backendSuite } from "../conformance/suite.js";
import { sqliteCapabilities, sqliteFileConformance } from "../helpers/sqlite-suite.js";

sqliteFileConformance("sqlite file");

backendSuite("sqlite :memory:", {
  capabilities: sqliteCapabilities({ file: false }),
  async make(clock) {
    return new SqliteBackend({ path: ":memory:", clock });
  },
});
