// s3rver ships no types; only what the benchmark uses.
declare module 's3rver' {
  export default class S3rver {
    constructor(options: { port?: number; address?: string; silent?: boolean; directory: string; configureBuckets?: Array<{ name: string }> });
    run(): Promise<{ port: number; address: string }>;
    close(): Promise<void>;
  }
}
