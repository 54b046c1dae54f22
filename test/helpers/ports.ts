/** Moved to testkit/servers/ports.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/ports.js";
