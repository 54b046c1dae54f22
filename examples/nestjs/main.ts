/**
 * Boots the NestJS example without HTTP (an application context), signs a user up, waits for the
 * welcome email, and shuts down through Nest's lifecycle (which closes the worker, the queue and
 * the backend in that order).
 *
 *   npx tsx --tsconfig examples/nestjs/tsconfig.json examples/nestjs/main.ts
 */
import "reflect-metadata";
import { NestFactory } from "@nestjs/core";
import { Queue } from "conveyor-jobs";
import { AppModule, sendWelcome, SignupService } from "./app.module.js";

const app = await NestFactory.createApplicationContext(AppModule, { logger: ["warn", "error"] });
app.enableShutdownHooks();
const jobId = await app.get(SignupService).signUp(`u_${Date.now()}`);
const queue = app.get(Queue);
for (;;) {
  const job = sendWelcome.narrow(await queue.getJob(jobId));
  if (job?.state === "completed") {
    console.log(`${jobId}: ${job.state}, message ${job.result?.messageId}`);
    break;
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await app.close();
