import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Fit under the strategy so that a run killed part-way resumes from its last completed epoch."""
    with strategy.scope():
        model = build_and_compile()
    # At the end of every epoch the backup holds the weights, the optimizer's state and the epoch reached; a
    # new run with the same backup_dir restores them before training and skips the epochs already done.
    backup = keras.callbacks.BackupAndRestore(backup_dir)
    model.fit(dataset, epochs=epochs, callbacks=[backup, *callbacks], verbose=0)
    return model
