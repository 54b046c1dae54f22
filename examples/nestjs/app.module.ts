/**
 * A small NestJS application using ConveyorModule: a SignupService adds a typed job, and the
 * handler (built by a factory, so it can use the Mailer service) sends the welcome email.
 *
 *   npx tsx --tsconfig examples/nestjs/tsconfig.json examples/nestjs/main.ts
 */
import { Inject, Injectable, Module } from "@nestjs/common";
import { defineJob, Queue } from "conveyor-jobs";
import { SqliteBackend } from "conveyor-jobs/sqlite";
import { z } from "zod";
import { ConveyorModule } from "./conveyor.module.js";

export const sendWelcome = defineJob<{ userId: string }, { messageId: string }>("send-welcome", z.object({ userId: z.string().min(1) }));

/** Stands in for your mail provider's client. */
@Injectable()
export class Mailer {
  readonly sent: string[] = [];
  async send(to: string): Promise<string> {
    this.sent.push(to);
    return `msg-${this.sent.length}`;
  }
}

@Module({ providers: [Mailer], exports: [Mailer] })
export class MailModule {}

@Injectable()
export class SignupService {
  constructor(@Inject(Queue) private readonly queue: Queue) {}

  /** Answers at once; the email goes out from the worker. */
  async signUp(userId: string): Promise<string> {
    const { id } = await this.queue.add(sendWelcome, { userId }, { jobId: `welcome:${userId}` });
    return id;
  }
}

@Module({
  imports: [
    MailModule,
    ConveyorModule.forRoot({
      imports: [MailModule],
      backend: () => new SqliteBackend({ path: process.env.DB ?? ".tmp/nestjs.db" }),
      queue: "email",
      handlers: {
        useFactory: (mailer: Mailer) => [sendWelcome.handle(async (job) => ({ messageId: await mailer.send(job.data.userId) }))],
        inject: [Mailer],
      },
      worker: { concurrency: 5 },
    }),
  ],
  providers: [SignupService],
})
export class AppModule {}
