package org.infokv;

import java.util.Collections;
import java.util.List;

/**
 * What the auto policy chose at a sequence's latest compression ({@link Session#autoReport}): one {@link Layer} per
 * model layer, the mean proxy loss (the relative error of the observation window's attention output against the
 * full cache), the tokens kept in all layers, what a uniform budget would have kept (0 under a quality target) and
 * the quality target it was held to (0: a byte budget).
 */
public final class AutoReport {
  /** What ranked a layer's tokens: the C IKV_EVIDENCE_* values. */
  public static final int EVIDENCE_WINDOW_ATTENTION = InfokvNativeConstants.IKV_EVIDENCE_WINDOW_ATTENTION;
  public static final int EVIDENCE_INFOKV = InfokvNativeConstants.IKV_EVIDENCE_INFOKV;
  public static final int EVIDENCE_ACCUMULATED_ATTENTION = InfokvNativeConstants.IKV_EVIDENCE_ACCUMULATED_ATTENTION;
  public static final int EVIDENCE_LAST_QUERY = InfokvNativeConstants.IKV_EVIDENCE_LAST_QUERY;
  public static final int EVIDENCE_RECENCY = InfokvNativeConstants.IKV_EVIDENCE_RECENCY;
  public static final int EVIDENCE_KEY_NORM = InfokvNativeConstants.IKV_EVIDENCE_KEY_NORM;
  public static final int EVIDENCE_REPLAY = InfokvNativeConstants.IKV_EVIDENCE_REPLAY;

  /** "window_attention", "infokv", "accumulated_attention", "last_query", "recency", "key_norm", "replay"; else
   * "unknown". */
  public static String evidenceName(int evidence) { return InfokvNative.ikv_evidence_name(evidence); }

  /** One layer's choice. */
  public static final class Layer {
    private final int evidence;
    private final int budget;
    private final double alpha;
    private final double loss;

    Layer(int evidence, int budget, double alpha, double loss) {
      this.evidence = evidence;
      this.budget = budget;
      this.alpha = alpha;
      this.loss = loss;
    }

    /** The EVIDENCE_* value that ranked the layer's tokens. */
    public int evidence() { return evidence; }
    /** Its name ({@link AutoReport#evidenceName}). */
    public String evidenceName() { return AutoReport.evidenceName(evidence); }
    /** Tokens the layer kept. */
    public int budget() { return budget; }
    /** Attention weight of the InfoKV mix when the evidence is EVIDENCE_INFOKV; 1 otherwise. */
    public double alpha() { return alpha; }
    /** The layer's proxy loss at that budget. */
    public double loss() { return loss; }

    @Override
    public String toString() {
      return "Layer{" + evidenceName() + ", alpha=" + alpha + ", budget=" + budget + ", loss=" + loss + "}";
    }
  }

  private final List<Layer> layers;
  private final double loss;
  private final long tokens;
  private final long uniformTokens;
  private final double maxLoss;

  AutoReport(List<Layer> layers, double loss, long tokens, long uniformTokens, double maxLoss) {
    this.layers = Collections.unmodifiableList(layers);
    this.loss = loss;
    this.tokens = tokens;
    this.uniformTokens = uniformTokens;
    this.maxLoss = maxLoss;
  }

  /** One entry per model layer, in layer order. */
  public List<Layer> layers() { return layers; }
  /** Mean of the layers' proxy losses. */
  public double loss() { return loss; }
  /** Tokens kept, all layers together. */
  public long tokens() { return tokens; }
  /** What a uniform budget would have kept, all layers together; 0 under a quality target. */
  public long uniformTokens() { return uniformTokens; }
  /** The quality target the compression was held to; 0 when it compressed to a byte budget. */
  public double maxLoss() { return maxLoss; }

  @Override
  public String toString() {
    return "AutoReport{layers=" + layers + ", loss=" + loss + ", tokens=" + tokens + ", uniformTokens=" + uniformTokens
        + ", maxLoss=" + maxLoss + "}";
  }
}
