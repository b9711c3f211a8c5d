export * from '../index/index.js';
