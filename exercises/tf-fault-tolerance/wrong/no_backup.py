def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    with strategy.scope():
        model = build_and_compile()
    # Mistake: nothing is saved, so a restarted worker trains again from epoch 0
    model.fit(dataset, epochs=epochs, callbacks=list(callbacks), verbose=0)
    return model
