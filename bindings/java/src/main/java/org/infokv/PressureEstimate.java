package org.infokv;

/**
 * What {@link Session#pressureEstimate} found: compressing a sequence to its budget now would return {@link #blocks}
 * KV blocks to the pool at an estimated loss of {@link #costPerBlock} per block (the share of the policy's score
 * mass evicted, divided by the blocks). Both are 0 at or under the budget and without a policy.
 */
public final class PressureEstimate {
  private final long blocks;
  private final double costPerBlock;

  PressureEstimate(long blocks, double costPerBlock) {
    this.blocks = blocks;
    this.costPerBlock = costPerBlock;
  }

  /** KV blocks the compression would return to the pool. */
  public long blocks() { return blocks; }

  /** Estimated loss per freed block (memory pressure compresses the lowest first). */
  public double costPerBlock() { return costPerBlock; }

  @Override
  public String toString() { return "PressureEstimate{blocks=" + blocks + ", costPerBlock=" + costPerBlock + "}"; }
}
