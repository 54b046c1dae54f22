/** Moved to testkit/servers/rabbitmq.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/rabbitmq.js";
