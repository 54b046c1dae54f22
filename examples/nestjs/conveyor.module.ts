/**
 * Conveyor in NestJS: one global module owns the backend, the Queue and the Worker, and their
 * lifecycles follow the application's. The worker starts claiming once the whole application has
 * bootstrapped (so handlers never run against half-built services) and on shutdown closes first
 * (drains, then releases what is left), then the queue (waits for adds in flight), then the backend.
 *
 * Nest's decorators are the legacy TypeScript ones: this folder has its own tsconfig.json with
 * experimentalDecorators, and every injection names its token with @Inject (no reliance on
 * emitDecoratorMetadata, which esbuild/tsx do not emit).
 */
import "reflect-metadata";
import { Inject, Injectable, Module, type DynamicModule, type OnApplicationBootstrap, type OnApplicationShutdown, type Provider } from "@nestjs/common";
import { Queue, Worker, type Backend, type Handlers, type WorkerOptions } from "conveyor-jobs";

/** Injection token of the store. */
export const CONVEYOR_BACKEND = Symbol("CONVEYOR_BACKEND");
/** Injection token of the handlers map the worker runs. */
export const CONVEYOR_HANDLERS = Symbol("CONVEYOR_HANDLERS");

export interface ConveyorModuleOptions {
  /** Creates the store once per application (e.g. `() => new PostgresBackend({ connectionString })`). */
  backend: () => Backend;
  /** The queue the application adds to and the worker takes from. */
  queue: string;
  /** The handlers, built by a factory so they can use your services: `{ useFactory, inject }`. */
  handlers: Omit<Extract<Provider, { useFactory: unknown }>, "provide">;
  /** Modules exporting what the handlers' factory injects. Default none. */
  imports?: DynamicModule["imports"];
  /** Worker settings (concurrency, leaseMs …); `autostart` is managed here. */
  worker?: Omit<WorkerOptions, "backend" | "queues" | "handlers" | "autostart">;
}

@Injectable()
class ConveyorLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(
    @Inject(CONVEYOR_BACKEND) private readonly backend: Backend,
    @Inject(Queue) private readonly queue: Queue,
    @Inject(Worker) private readonly worker: Worker,
  ) {}

  onApplicationBootstrap(): void {
    this.worker.run();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.worker.close();
    await this.queue.close();
    await this.backend.close();
  }
}

@Module({})
export class ConveyorModule {
  static forRoot(options: ConveyorModuleOptions): DynamicModule {
    return {
      module: ConveyorModule,
      global: true,
      imports: options.imports ?? [],
      providers: [
        { provide: CONVEYOR_BACKEND, useFactory: options.backend },
        { provide: Queue, useFactory: (backend: Backend) => new Queue(options.queue, { backend }), inject: [CONVEYOR_BACKEND] },
        { ...options.handlers, provide: CONVEYOR_HANDLERS },
        {
          provide: Worker,
          useFactory: (backend: Backend, handlers: Handlers) => new Worker({ ...options.worker, backend, queues: options.queue, handlers, autostart: false }),
          inject: [CONVEYOR_BACKEND, CONVEYOR_HANDLERS],
        },
        ConveyorLifecycle,
      ],
      exports: [CONVEYOR_BACKEND, Queue, Worker],
    };
  }
}
