/**
 * `conveyor-jobs/sqlite`: the embedded backend. Importing this subpath loads better-sqlite3, which is
 * an optional peer dependency (`npm install better-sqlite3`).
 */
export { SqliteBackend, type SqliteBackendOptions } from "./backend.js";
export { SchemaTooNewError } from "../migration-files.js";
