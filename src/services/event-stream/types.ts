// What a live stream is made of: the sink a transport writes to, and the state the registry keeps of it.
import type { EventFilter, EventRecord, RejectionRecord } from '../../storage/types.js';

export type CloseReason = 'shutdown' | 'slow' | 'error';

export interface StreamSink {
  /** Sends one event. */
  send(event: EventRecord): void;
  /** Sends one recorded rejection (only to streams opened with `includeRejections`). */
  sendRejection?(rejection: RejectionRecord): void;
  /**
   * Whether the consumer is too slow: more than its bound still unsent from earlier pages. Asked before
   * each page is fanned out, so a stream holds at most its bound plus one page (`pageSize` events).
   */
  lagging(): boolean;
  /** Resolves when the sink can take more; rejects or resolves false when it closed meanwhile. */
  ready(): Promise<boolean>;
  close(reason: CloseReason): void;
}

export interface EventStreamOptions {
  pollMs: number;
  maxStreams: number;
  pageSize?: number;
  now?: () => number;
}

export interface StreamOptions {
  /** Also send the product's rejections as they are recorded (live only). */
  includeRejections?: boolean;
}

export interface Subscriber {
  productId: string;
  filter: EventFilter;
  sink: StreamSink;
  /** Everything at or below this position has been read for this stream. */
  seen: string | null;
  closed: boolean;
  includeRejections: boolean;
  /** Rejections received before the stream opened are not sent (it starts at the current end). */
  openedAt: number;
}

/** The tail of one watched product: how far it has been read, and the streams that follow it. */
export interface ProductTail {
  cursor: string | null;
  subscribers: Set<Subscriber>;
  /** Rejection ids already sent, with when they were recorded (forgotten once out of the window). */
  rejectionsSent: Map<string, number>;
}

/** Orders two commit positions (the storage's comparison). */
export type ComparePositions = (a: string, b: string) => number;
