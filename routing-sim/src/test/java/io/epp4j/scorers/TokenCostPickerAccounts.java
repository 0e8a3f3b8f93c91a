package io.epp4j.scorers;

/**
 * Reads {@link TokenCostPicker}'s own accounts from the simulator's tests (they live in this
 * package so that the picker keeps its accessors package-private).
 */
public final class TokenCostPickerAccounts {
  private TokenCostPickerAccounts() {}

  /** Uncached prompt tokens the picker counts as pending on {@code endpointId}. */
  public static long pendingTokens(TokenCostPicker picker, String endpointId) {
    return picker.pendingTokens(endpointId);
  }

  /** Requests the picker counts as pending or decoding. */
  public static int pendingRequests(TokenCostPicker picker) {
    return picker.pendingRequests();
  }
}
